//! Parsing an expression (depth and length limits) and the CEL environment selectors run in.

use std::sync::{Arc, LazyLock};

use super::*;
use cel::common::ast::{
    ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr, StructExpr,
};
use cel::common::types::{CelBool, CelDouble, CelInt, CelString};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, DeclarationError, Env, Program};

/// The stack [`CelSelector::compile`] parses on: enough for the longest chain that fits in
/// [`MAX_EXPRESSION_LEN`], with room to spare.
pub(super) const PARSER_STACK: usize = 32 << 20;

/// The deepest expression tree accepted. Evaluation recurses once per level, on the caller's
/// stack: built at opt-level 1 or more, as the workspace's profiles are, this depth takes well
/// under the 2 MiB a spawned thread has.
pub(super) const MAX_DEPTH: usize = 100;

pub(super) fn parse(expression: &str) -> Result<Program, String> {
    let program = ENV
        .compile(expression)
        .map_err(|e| format!("compilation failed: {e}"))?;
    // Without the check, `matches` would only fail once evaluated, as an undeclared function.
    if program.references().has_function("matches") {
        return Err(
            "compilation failed: matches() is not supported (no regular expressions)".into(),
        );
    }
    let depth = tree_depth(program.expression());
    if depth > MAX_DEPTH {
        return Err(format!(
            "compilation failed: the expression nests {depth} levels deep, more than the \
             {MAX_DEPTH} allowed"
        ));
    }
    Ok(program)
}

/// How many levels deep the tree of `expr` is.
pub(super) fn tree_depth(expr: &IdedExpr) -> usize {
    1 + children(expr)
        .into_iter()
        .map(tree_depth)
        .max()
        .unwrap_or(0)
}

/// The expressions right below `expr`.
pub(super) fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    let mut children: Vec<&IdedExpr> = Vec::new();
    match &expr.expr {
        Expr::Call(call) => {
            children.extend(call.target.as_deref());
            children.extend(&call.args);
        }
        Expr::Comprehension(c) => children.extend([
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]),
        Expr::List(list) => children.extend(&list.elements),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => children.push(&field.value),
                    EntryExpr::MapEntry(entry) => children.extend([&entry.key, &entry.value]),
                }
            }
        }
        Expr::Select(select) => children.push(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    children
}

pub(super) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    Arc::new(environment().expect("the DRA environment declares each function once"))
});

// Every evaluation opens its own scope in this one, so that none has to build a context.
pub(super) static ROOT: LazyLock<Context<'static, 'static>> =
    LazyLock::new(|| Context::with_env(Arc::clone(&ENV)));

pub(super) fn environment() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_macro(Macro::receiver("bind", 3, bind))?;

    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn quantity_compare_to: (Quantity, Quantity) -> CelInt,
        name = "compareTo")?;
    cel::add_member_overload!(env, fn quantity_is_greater_than: (Quantity, Quantity) -> CelBool,
        name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn quantity_is_less_than: (Quantity, Quantity) -> CelBool,
        name = "isLessThan")?;
    cel::add_member_overload!(env, fn quantity_add: (Quantity, Quantity) -> Result<Quantity>,
        name = "add")?;
    cel::add_member_overload!(env, fn quantity_add_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "add")?;
    cel::add_member_overload!(env, fn quantity_sub: (Quantity, Quantity) -> Result<Quantity>,
        name = "sub")?;
    cel::add_member_overload!(env, fn quantity_sub_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "sub")?;
    cel::add_member_overload!(env, fn quantity_sign: (Quantity) -> CelInt, name = "sign")?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;

    cel::add_overload!(env, fn semver: (CelString) -> Result<Semver>)?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn semver_compare_to: (Semver, Semver) -> CelInt,
        name = "compareTo")?;
    cel::add_member_overload!(env, fn semver_is_greater_than: (Semver, Semver) -> CelBool,
        name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn semver_is_less_than: (Semver, Semver) -> CelBool,
        name = "isLessThan")?;
    cel::add_member_overload!(env, fn major: (Semver) -> CelInt)?;
    cel::add_member_overload!(env, fn minor: (Semver) -> CelInt)?;
    cel::add_member_overload!(env, fn patch: (Semver) -> CelInt)?;
    Ok(env)
}

/// Expands `cel.bind(name, init, body)` (cel-go's bindings extension, which Kubernetes enables
/// for DRA) as cel-go does: a comprehension over nothing whose accumulator `name` is `init`.
pub(super) fn bind(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(ns)) if ns == "cel") {
        return Ok(None);
    }
    let Expr::Ident(name) = &args[0].expr else {
        return Err(helper.new_error(args[0].id, "cel.bind() variable must be a simple name"));
    };
    let name = name.clone();
    let (Some(body), Some(init)) = (args.pop(), args.pop()) else {
        unreachable!("the macro is declared with 3 arguments");
    };
    let bound = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(name)),
        result: body,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bound)))))
}
