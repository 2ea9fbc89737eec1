//! CEL device selectors of Dynamic Resource Allocation (resource.k8s.io/v1): a request's
//! `DeviceSelector.cel.expression` and a DeviceClass's selectors, evaluated against one device
//! as kube-scheduler's structured-parameters allocator does (k8s.io/dynamic-resource-allocation/cel).
//!
//! A selector sees `device.driver`, `device.attributes[domain].id`, `device.capacity[domain].id`
//! (quantities) and `device.allowMultipleAllocations`, with CEL's standard library, the strings
//! extension, Kubernetes' `quantity()` and `semver()` libraries, and `cel.bind()`. As in
//! Kubernetes, a missing attribute is an error, while a domain the device has nothing in reads as
//! an empty map. Left out: `matches()` (regular expressions need `cel`'s `regex` feature), which
//! fails to compile, and Kubernetes' runtime cost limit.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::thread;

use cel::common::ast::{
    ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr, StructExpr,
};
use cel::common::traits::{Container, Indexer, Iterable, Sizer};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelMap, CelMapKey, CelString, Type, MAP_TYPE,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::context::VariableResolver;
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, DeclarationError, Env, ExecutionError, Program, Value};

/// One attribute value of a device, as ResourceSlice publishes it: the engine's type.
pub use kestrel_core::DeviceAttribute as AttributeValue;

/// What a selector sees of one device: `device.driver`, `device.attributes`, `device.capacity`
/// (and `device.allowMultipleAllocations` = false).
///
/// Attribute and capacity names are fully qualified: "gpu.nvidia.com/productName",
/// "resource.kubernetes.io/pcieRoot". An unqualified name belongs to the driver's domain, as in
/// Kubernetes.
pub struct DeviceView<'a> {
    pub driver: &'a str,
    pub attributes: &'a BTreeMap<String, AttributeValue>,
    /// Capacity values in base units (bytes for memory), the quantity's value rounded up to an
    /// integer: see [`parse_quantity`].
    pub capacity: &'a BTreeMap<String, i64>,
}

/// The longest expression Kubernetes accepts (`CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LEN: usize = 10 * 1024;

/// A compiled selector expression. Compile once, evaluate many times.
pub struct CelSelector {
    expression: String,
    program: Program,
    /// What of a device it reads, when its tree tells.
    reads: Option<Reads>,
}

/// The parts of a device a selector reads, when every use of `device` in it names one:
/// `device.driver`, `device.attributes['domain'].id` (or `['domain']['id']`) and the same of
/// `device.capacity`. Devices alike in these parts get the same verdict, so a cluster of
/// one GPU model needs its selectors evaluated once, not once per GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    pub driver: bool,
    /// (domain, id) pairs read from `device.attributes`, sorted.
    pub attributes: Vec<(String, String)>,
    /// (domain, id) pairs read from `device.capacity`, sorted.
    pub capacity: Vec<(String, String)>,
}

impl Reads {
    /// The parts `expr` reads, or `None` when it uses `device` in another way (a whole
    /// domain's map, `device` itself, a variable of a macro named `device`).
    fn of(expr: &IdedExpr) -> Option<Reads> {
        let mut reads = Reads::default();
        if !reads.visit(expr) {
            return None;
        }
        reads.attributes.sort();
        reads.attributes.dedup();
        reads.capacity.sort();
        reads.capacity.dedup();
        Some(reads)
    }

    /// Both selectors' reads together.
    pub fn union(mut self, other: &Reads) -> Reads {
        self.driver |= other.driver;
        self.attributes.extend(other.attributes.iter().cloned());
        self.attributes.sort();
        self.attributes.dedup();
        self.capacity.extend(other.capacity.iter().cloned());
        self.capacity.sort();
        self.capacity.dedup();
        self
    }

    fn visit(&mut self, expr: &IdedExpr) -> bool {
        let is_device = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == "device");
        // device.attributes['domain'] or device.capacity['domain']: (is capacity, domain).
        let domain = |e: &IdedExpr| -> Option<(bool, String)> {
            let Expr::Call(call) = &e.expr else {
                return None;
            };
            if call.func_name != "_[_]" || call.target.is_some() || call.args.len() != 2 {
                return None;
            }
            let Expr::Select(select) = &call.args[0].expr else {
                return None;
            };
            let capacity = match select.field.as_str() {
                "attributes" => false,
                "capacity" => true,
                _ => return None,
            };
            match (&call.args[1].expr, is_device(&select.operand), select.test) {
                (Expr::Literal(LiteralValue::String(d)), true, false) => {
                    Some((capacity, d.inner().to_string()))
                }
                _ => None,
            }
        };
        let read = |capacity: bool, domain: String, id: &str, reads: &mut Reads| {
            let list = if capacity {
                &mut reads.capacity
            } else {
                &mut reads.attributes
            };
            list.push((domain, id.to_string()));
        };
        match &expr.expr {
            Expr::Ident(name) => name != "device",
            Expr::Select(select) if is_device(&select.operand) => match select.field.as_str() {
                "driver" => {
                    self.driver = true;
                    !select.test
                }
                "allowMultipleAllocations" => !select.test,
                _ => false,
            },
            Expr::Select(select) => match domain(&select.operand) {
                Some((capacity, d)) => {
                    read(capacity, d, &select.field, self);
                    true
                }
                None => self.visit(&select.operand),
            },
            Expr::Call(call) if call.func_name == "_[_]" && call.args.len() == 2 => {
                match (domain(&call.args[0]), &call.args[1].expr) {
                    (Some((capacity, d)), Expr::Literal(LiteralValue::String(id))) => {
                        read(capacity, d, id.inner(), self);
                        true
                    }
                    _ => call.args.iter().all(|a| self.visit(a)),
                }
            }
            Expr::Comprehension(c)
                if c.iter_var == "device"
                    || c.accu_var == "device"
                    || c.iter_var2.as_deref() == Some("device") =>
            {
                false
            }
            _ => children(expr).into_iter().all(|c| self.visit(c)),
        }
    }
}

impl CelSelector {
    /// Parses `expression`; the error says what is wrong and where.
    pub fn compile(expression: &str) -> Result<CelSelector, String> {
        if expression.len() > MAX_EXPRESSION_LEN {
            return Err(format!(
                "the expression is {} bytes long, more than the {MAX_EXPRESSION_LEN} allowed",
                expression.len()
            ));
        }
        // The parser recurses once per link of a chain such as `a.b.c` or `1 + 2 + 3`, which
        // can be thousands long: more than the caller's stack may hold.
        let program = thread::scope(|scope| {
            thread::Builder::new()
                .stack_size(PARSER_STACK)
                .spawn_scoped(scope, || parse(expression))
                .map_err(|e| format!("cannot start the CEL parser: {e}"))?
                .join()
                .map_err(|_| "the CEL parser failed".to_owned())?
        })?;
        let reads = Reads::of(program.expression());
        Ok(CelSelector {
            expression: expression.to_owned(),
            program,
            reads,
        })
    }

    /// What of a device it reads, when every use of `device` names one part ([`Reads`]).
    pub fn reads(&self) -> Option<&Reads> {
        self.reads.as_ref()
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether `device` is selected; `Err` for a runtime error (a missing attribute, a type
    /// error, a result that is not a bool), which Kubernetes reports and does not allocate on.
    ///
    /// It builds the device's CEL value each time: to evaluate several selectors against one
    /// device, build a [`DeviceValue`] once and use [`CelSelector::matches_value`].
    pub fn matches(&self, device: &DeviceView<'_>) -> Result<bool, String> {
        self.matches_value(&DeviceValue::new(device)?)
    }

    /// As [`CelSelector::matches`], against a device's prebuilt CEL value.
    pub fn matches_value(&self, device: &DeviceValue<'_>) -> Result<bool, String> {
        let root: &Context<'_, '_> = &ROOT;
        let mut context = root.new_inner_scope();
        context.set_variable_resolver(device);
        let result =
            Value::resolve_val(self.program.expression(), &context).map_err(|e| e.to_string())?;
        match result.downcast_ref::<CelBool>() {
            Some(selected) => Ok(*selected.inner()),
            None => Err(format!(
                "the expression yields {}, not bool",
                result.get_type().name()
            )),
        }
    }
}

impl fmt::Debug for CelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CelSelector")
            .field(&self.expression)
            .finish()
    }
}

/// The Kubernetes quantity `text` (`"40Gi"`, `"500m"`, `"1e3"`) in base units, rounded away
/// from zero to an integer as `Quantity.Value()` does: what [`DeviceView::capacity`] holds.
pub fn parse_quantity(text: &str) -> Result<i64, String> {
    let nanos = parse_nanos(text)?;
    let units = nanos / NANOS + i128::from(nanos % NANOS != 0) * nanos.signum();
    i64::try_from(units).map_err(|_| format!("quantity {text:?} is out of range"))
}

/// The stack [`CelSelector::compile`] parses on: enough for the longest chain that fits in
/// [`MAX_EXPRESSION_LEN`], with room to spare.
const PARSER_STACK: usize = 32 << 20;

/// The deepest expression tree accepted. Evaluation recurses once per level, on the caller's
/// stack: built at opt-level 1 or more, as the workspace's profiles are, this depth takes well
/// under the 2 MiB a spawned thread has.
const MAX_DEPTH: usize = 100;

fn parse(expression: &str) -> Result<Program, String> {
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
fn tree_depth(expr: &IdedExpr) -> usize {
    1 + children(expr)
        .into_iter()
        .map(tree_depth)
        .max()
        .unwrap_or(0)
}

/// The expressions right below `expr`.
fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
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

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    Arc::new(environment().expect("the DRA environment declares each function once"))
});

// Every evaluation opens its own scope in this one, so that none has to build a context.
static ROOT: LazyLock<Context<'static, 'static>> =
    LazyLock::new(|| Context::with_env(Arc::clone(&ENV)));

fn environment() -> Result<Env, DeclarationError> {
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
fn bind(
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

/// Whether every version attribute is a semantic version, which [`DeviceValue::new`]
/// requires.
pub fn versions_parse(attributes: &BTreeMap<String, AttributeValue>) -> bool {
    attributes.values().all(|v| match v {
        AttributeValue::Version(v) => Semver::parse(v).is_ok(),
        _ => true,
    })
}

/// `device` as CEL sees it, built once from a [`DeviceView`] so that several selectors can be
/// evaluated against it ([`CelSelector::matches_value`]) without rebuilding its maps.
#[derive(Debug, Clone)]
pub struct DeviceValue<'a> {
    driver: CelString<'a>,
    attributes: Domains<'a>,
    capacity: Domains<'a>,
}

static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

impl<'a> DeviceValue<'a> {
    /// Fails, as Kubernetes does, on a version attribute that is not a semantic version.
    pub fn new(device: &DeviceView<'a>) -> Result<DeviceValue<'a>, String> {
        let attributes = Domains::group(device.driver, device.attributes, |name, value| {
            Ok(match value {
                AttributeValue::Int(i) => Box::new(CelInt::from(*i)),
                AttributeValue::Bool(b) => Box::new(CelBool::from(*b)),
                AttributeValue::String(s) => Box::new(CelString::from(s.as_str())),
                AttributeValue::Version(v) => {
                    Box::new(Semver::parse(v).map_err(|e| format!("attribute {name}: {e}"))?)
                }
            })
        })?;
        let capacity = Domains::group(device.driver, device.capacity, |_, value| {
            Ok(Box::new(Quantity(i128::from(*value) * NANOS)))
        })?;
        Ok(DeviceValue {
            driver: CelString::from(device.driver),
            attributes,
            capacity,
        })
    }
}

impl Val for DeviceValue<'_> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }

    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for DeviceValue<'_> {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&self.driver)),
            Some("attributes") => Ok(CowVal::Borrowed(&self.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&self.capacity)),
            // Only devices of the DRAConsumableCapacity feature, which Kestrel lacks, have it set.
            Some("allowMultipleAllocations") => Ok(CowVal::owned(CelBool::from(false))),
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: field.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// Binds the variable `device`.
impl VariableResolver for DeviceValue<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "device").then_some(CowVal::Borrowed(self))
    }
}

/// `device.attributes` or `device.capacity`: a map from domain to a map from id to value. As in
/// Kubernetes, a domain the device has nothing in looks up as an empty map, so that
/// `"id" in device.attributes["other.example.com"]` is false rather than an error.
#[derive(Debug, Clone)]
struct Domains<'a> {
    domains: CelMap<'a>,
    empty: CelMap<'a>,
}

type MapEntry<'a> = (CelMapKey<'a>, Box<dyn Val + 'a>);

impl<'a> Domains<'a> {
    fn group<V>(
        driver: &'a str,
        entries: &'a BTreeMap<String, V>,
        value: impl Fn(&'a str, &'a V) -> Result<Box<dyn Val + 'a>, String>,
    ) -> Result<Domains<'a>, String> {
        // Devices have few domains: a list finds them faster than hashing, and collecting each
        // domain's entries first sizes its map at once.
        let mut grouped: Vec<(&str, Vec<MapEntry<'a>>)> = Vec::new();
        for (name, v) in entries {
            let (domain, id) = name.split_once('/').unwrap_or((driver, name));
            let entry = (CelMapKey::String(id.into()), value(name, v)?);
            match grouped.iter_mut().find(|(d, _)| *d == domain) {
                Some((_, ids)) => ids.push(entry),
                None => grouped.push((domain, vec![entry])),
            }
        }
        let domains = grouped
            .into_iter()
            .map(|(domain, ids)| {
                let ids: HashMap<_, _> = ids.into_iter().collect();
                let ids: Box<dyn Val + 'a> = Box::new(CelMap::from(ids));
                (CelMapKey::String(domain.into()), ids)
            })
            .collect::<HashMap<_, _>>();
        Ok(Domains {
            domains: domains.into(),
            empty: CelMap::default(),
        })
    }
}

impl Val for Domains<'_> {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.domains.as_container()
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        self.domains.as_iterable()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.domains.as_sizer()
    }

    // Entry by entry, as `other` may be a map literal or another `Domains`, which no downcast finds.
    fn equals(&self, other: &dyn Val) -> bool {
        let entries = self.domains.inner();
        *other.get_type() == MAP_TYPE
            && other
                .as_sizer()
                .is_some_and(|s| *s.size().inner() == entries.len() as i64)
            && other.as_indexer().is_some_and(|o| {
                entries.iter().all(|(domain, ids)| {
                    o.get(domain.inner())
                        .is_ok_and(|other_ids| ids.equals(other_ids.as_ref()))
                })
            })
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for Domains<'_> {
    fn get<'b, 'v>(&'b self, domain: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match self.domains.get(domain) {
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::Borrowed(&self.empty)),
            found => found,
        }
    }

    fn steal<'v>(self: Box<Self>, domain: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(domain).map(CowVal::into_owned)
    }
}

const NANOS: i128 = 1_000_000_000;

/// A Kubernetes quantity (`kubernetes.Quantity`), in nano units: Kubernetes keeps quantities
/// exact down to 1n, so `quantity("500m")` and `quantity("1")` stay apart. A type of its own
/// rather than an int, so that `compareTo` and the like pick the quantity overloads and
/// `quantity("1").compareTo(semver("1.0.0"))` is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Quantity(i128);

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>() == Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

/// `text` as a quantity in nano units, rounded away from zero as Kubernetes' `ParseQuantity`
/// rounds to 1n. Magnitudes past `i128` (about 1.7e29 units) are out of range.
fn parse_nanos(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a quantity");
    let out_of_range = || format!("quantity {text:?} is out of range");
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    fn split_digits(s: &str) -> (&str, &str) {
        s.split_at(s.bytes().take_while(u8::is_ascii_digit).count())
    }
    let (whole, rest) = split_digits(unsigned);
    let (fraction, suffix) = rest.strip_prefix('.').map_or(("", rest), split_digits);
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let (binary_exponent, decimal_exponent) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => match suffix.strip_prefix(['e', 'E']) {
            Some(exponent) => (0, exponent.parse::<i32>().map_err(|_| bad())?),
            None => return Err(bad()),
        },
    };
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let mantissa: u128 = match digits {
        "" => 0,
        _ => digits.parse().map_err(|_| out_of_range())?,
    };
    let mantissa = mantissa
        .checked_mul(1 << binary_exponent)
        .ok_or_else(out_of_range)?;
    // The fraction's digits are in the mantissa: shift back by as many places.
    let scale = i64::from(decimal_exponent) + 9 - fraction.len() as i64;
    let magnitude = if scale >= 0 {
        u32::try_from(scale)
            .ok()
            .and_then(|s| 10u128.checked_pow(s))
            .and_then(|p| mantissa.checked_mul(p))
            .ok_or_else(out_of_range)?
    } else {
        match u32::try_from(-scale)
            .ok()
            .and_then(|s| 10u128.checked_pow(s))
        {
            Some(divisor) => mantissa.div_ceil(divisor),
            // Below 1n, which a non-zero quantity rounds up to.
            None => u128::from(mantissa != 0),
        }
    };
    // Kubernetes caps binary-suffixed quantities at the largest int64.
    let magnitude = if binary_exponent > 0 {
        magnitude.min(i64::MAX as u128 * NANOS as u128)
    } else {
        magnitude
    };
    let magnitude = i128::try_from(magnitude).map_err(|_| out_of_range())?;
    Ok(if negative { -magnitude } else { magnitude })
}

fn quantity(text: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse_nanos(text.inner())
        .map(Quantity)
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    parse_nanos(text.inner()).is_ok().into()
}

fn ordering(ordering: Ordering) -> CelInt {
    (ordering as i64).into()
}

fn quantity_compare_to(q: &Quantity, other: &Quantity) -> CelInt {
    ordering(q.cmp(other))
}

fn quantity_is_greater_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q > other).into()
}

fn quantity_is_less_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q < other).into()
}

fn overflow(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "quantity out of range")
}

fn quantity_add(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.0.checked_add(other.0)
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn quantity_add_int(q: &Quantity, units: &CelInt) -> Result<Quantity, ExecutionError> {
    quantity_add(q, &Quantity(i128::from(*units.inner()) * NANOS))
}

fn quantity_sub(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.0.checked_sub(other.0)
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

fn quantity_sub_int(q: &Quantity, units: &CelInt) -> Result<Quantity, ExecutionError> {
    quantity_sub(q, &Quantity(i128::from(*units.inner()) * NANOS))
}

fn quantity_sign(q: &Quantity) -> CelInt {
    (q.0.signum() as i64).into()
}

/// The quantity as a whole number of units, if it is one that fits an int. (Kubernetes also
/// refuses some whole quantities by their spelling, such as `1000m`.)
fn whole_units(q: &Quantity) -> Option<i64> {
    if q.0 % NANOS == 0 {
        i64::try_from(q.0 / NANOS).ok()
    } else {
        None
    }
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    whole_units(q).map(CelInt::from).ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })
}

fn is_integer(q: &Quantity) -> CelBool {
    whole_units(q).is_some().into()
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    (q.0 as f64 / NANOS as f64).into()
}

/// A semantic version (`kubernetes.Semver`), parsed as Kubernetes does (blang/semver's strict
/// `Parse`). Build metadata is checked, then ignored: it plays no part in comparisons.
#[derive(Debug, Clone)]
struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre_release: Vec<PreRelease>,
}

/// A pre-release identifier. The variant order is the precedence: numeric identifiers rank
/// below alphanumeric ones.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PreRelease {
    Numeric(u64),
    Alphanumeric(String),
}

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

impl Semver {
    fn parse(text: &str) -> Result<Semver, String> {
        let bad = |why: &str| format!("{text:?} is not a semantic version: {why}");
        let number = |part: &str, what: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                Err(bad(&format!("the {what} is not a number")))
            } else if part.len() > 1 && part.starts_with('0') {
                Err(bad(&format!("the {what} has a leading zero")))
            } else {
                part.parse::<u64>()
                    .map_err(|_| bad(&format!("the {what} is too large")))
            }
        };
        let identifiers = |part: &str, what: &str| {
            let valid = |id: &str| {
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            };
            if part.split('.').all(valid) {
                Ok(())
            } else {
                Err(bad(&format!("malformed {what}")))
            }
        };
        let (version, build) = text
            .split_once('+')
            .map_or((text, None), |(v, b)| (v, Some(b)));
        if let Some(build) = build {
            identifiers(build, "build metadata")?;
        }
        let (core, pre_release) = version
            .split_once('-')
            .map_or((version, None), |(c, p)| (c, Some(p)));
        let mut parts = core.split('.');
        let (Some(major), Some(minor), Some(patch), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not MAJOR.MINOR.PATCH"));
        };
        let pre_release = match pre_release {
            None => Vec::new(),
            Some(pre_release) => {
                identifiers(pre_release, "pre-release")?;
                pre_release
                    .split('.')
                    .map(|id| {
                        if id.bytes().all(|b| b.is_ascii_digit()) {
                            number(id, "numeric pre-release identifier").map(PreRelease::Numeric)
                        } else {
                            Ok(PreRelease::Alphanumeric(id.to_owned()))
                        }
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(Semver {
            major: number(major, "major version")?,
            minor: number(minor, "minor version")?,
            patch: number(patch, "patch version")?,
            pre_release,
        })
    }

    /// Semantic version precedence: a version without pre-release ranks above one with.
    fn precedence(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(
                || match (self.pre_release.is_empty(), other.pre_release.is_empty()) {
                    (true, true) => Ordering::Equal,
                    (true, false) => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => self.pre_release.cmp(&other.pre_release),
                },
            )
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|other| self.precedence(other).is_eq())
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

fn semver(text: &CelString<'_>) -> Result<Semver, ExecutionError> {
    Semver::parse(text.inner()).map_err(|e| ExecutionError::function_error("semver", e))
}

fn is_semver(text: &CelString<'_>) -> CelBool {
    Semver::parse(text.inner()).is_ok().into()
}

fn semver_compare_to(v: &Semver, other: &Semver) -> CelInt {
    ordering(v.precedence(other))
}

fn semver_is_greater_than(v: &Semver, other: &Semver) -> CelBool {
    v.precedence(other).is_gt().into()
}

fn semver_is_less_than(v: &Semver, other: &Semver) -> CelBool {
    v.precedence(other).is_lt().into()
}

// Versions past the largest int wrap, as they do in Kubernetes.
fn major(v: &Semver) -> CelInt {
    (v.major as i64).into()
}

fn minor(v: &Semver) -> CelInt {
    (v.minor as i64).into()
}

fn patch(v: &Semver) -> CelInt {
    (v.patch as i64).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Device {
        driver: &'static str,
        attributes: BTreeMap<String, AttributeValue>,
        capacity: BTreeMap<String, i64>,
    }

    impl Device {
        fn view(&self) -> DeviceView<'_> {
            DeviceView {
                driver: self.driver,
                attributes: &self.attributes,
                capacity: &self.capacity,
            }
        }
    }

    fn h100() -> Device {
        let attributes = [
            (
                "gpu.nvidia.com/productName",
                AttributeValue::String("NVIDIA H100 80GB HBM3".into()),
            ),
            (
                "gpu.nvidia.com/driverVersion",
                AttributeValue::Version("550.54.15".into()),
            ),
            (
                "gpu.nvidia.com/cudaComputeCapability",
                AttributeValue::Version("9.0.0".into()),
            ),
            ("gpu.nvidia.com/index", AttributeValue::Int(3)),
            ("gpu.nvidia.com/mig", AttributeValue::Bool(false)),
            (
                "resource.kubernetes.io/pcieRoot",
                AttributeValue::String("pci0000:00".into()),
            ),
            // Unqualified: the driver's domain.
            ("uuid", AttributeValue::String("GPU-1234".into())),
        ];
        Device {
            driver: "gpu.nvidia.com",
            attributes: attributes
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
            capacity: BTreeMap::from([("gpu.nvidia.com/memory".to_owned(), 80 << 30)]),
        }
    }

    fn eval(expression: &str) -> Result<bool, String> {
        CelSelector::compile(expression)?.matches(&h100().view())
    }

    fn reads(expression: &str) -> Option<Reads> {
        CelSelector::compile(expression).unwrap().reads().cloned()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(d, id)| (d.to_string(), id.to_string()))
            .collect()
    }

    #[test]
    fn reads_name_the_parts_of_a_device_a_selector_uses() {
        let r = reads(
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == \
             'gpu' && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
        )
        .unwrap();
        assert!(r.driver);
        assert_eq!(r.attributes, pairs(&[("gpu.nvidia.com", "type")]));
        assert_eq!(r.capacity, pairs(&[("gpu.nvidia.com", "memory")]));
        // Index form, has(), macros over other variables, cel.bind.
        let r = reads(
            "has(device.attributes['a.example.com'].x) && \
             device.attributes['a.example.com']['y'] > 1 && \
             [1, 2].all(i, i > 0) && cel.bind(v, device.attributes['b.example.com'].z, v)",
        )
        .unwrap();
        assert!(!r.driver);
        assert_eq!(
            r.attributes,
            pairs(&[
                ("a.example.com", "x"),
                ("a.example.com", "y"),
                ("b.example.com", "z")
            ])
        );
        // Uses that are not one part: a whole domain, all attributes, `device` itself, a
        // macro variable named `device`.
        for whole in [
            "'x' in device.attributes['a.example.com']",
            "device.attributes['a.example.com'].size() > 0",
            "device.attributes.size() > 0",
            "device != null",
            "[1].all(device, device > 0)",
            "device.attributes[device.driver].x == 1",
        ] {
            assert_eq!(reads(whole), None, "{whole}");
        }
    }

    #[track_caller]
    fn assert_selects(expression: &str, expected: bool) {
        assert_eq!(eval(expression), Ok(expected), "{expression}");
    }

    #[track_caller]
    fn assert_fails(expression: &str, wanted: &str) {
        let error = eval(expression).expect_err(expression);
        assert!(
            error.contains(wanted),
            "{expression}: {error:?} does not say {wanted:?}"
        );
    }

    #[test]
    fn selects_by_product_name() {
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3""#,
            true,
        );
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100""#,
            false,
        );
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")
               && device.attributes["gpu.nvidia.com"].productName.contains("80GB")
               && !device.attributes["gpu.nvidia.com"].productName.endsWith("PCIe")"#,
            true,
        );
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#,
            true,
        );
    }

    #[test]
    fn selects_by_driver() {
        assert_selects(r#"device.driver == "gpu.nvidia.com""#, true);
        assert_selects(r#"device.driver == "gpu.amd.com""#, false);
        assert_selects(r#"device.allowMultipleAllocations"#, false);
    }

    #[test]
    fn selects_by_other_attribute_types() {
        assert_selects(r#"device.attributes["gpu.nvidia.com"].index == 3"#, true);
        assert_selects(r#"device.attributes["gpu.nvidia.com"].index > 2"#, true);
        assert_selects(r#"!device.attributes["gpu.nvidia.com"].mig"#, true);
        assert_selects(
            r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00""#,
            true,
        );
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].uuid == "GPU-1234""#,
            true,
        );
    }

    #[test]
    fn compares_capacity_with_quantities() {
        let memory = r#"device.capacity["gpu.nvidia.com"].memory"#;
        assert_selects(
            &format!(r#"{memory}.compareTo(quantity("40Gi")) >= 0"#),
            true,
        );
        assert_selects(
            &format!(r#"{memory}.compareTo(quantity("80Gi")) == 0"#),
            true,
        );
        assert_selects(
            &format!(r#"{memory}.compareTo(quantity("81Gi")) < 0"#),
            true,
        );
        assert_selects(&format!(r#"{memory}.isGreaterThan(quantity("80G"))"#), true);
        assert_selects(&format!(r#"{memory}.isLessThan(quantity("1Ti"))"#), true);
        assert_selects(&format!(r#"{memory} == quantity("81920Mi")"#), true);
        assert_selects(&format!(r#"{memory}.asInteger() == 85899345920"#), true);
        assert_selects(
            &format!(r#"{memory}.sub(quantity("40Gi")).add(1) == quantity("40Gi").add(1)"#),
            true,
        );
        assert_selects(
            &format!(r#"{memory}.sub(quantity("81Gi")).sign() == -1"#),
            true,
        );
    }

    #[test]
    fn quantity_functions() {
        assert_selects(r#"quantity("200M").compareTo(quantity("0.2G")) == 0"#, true);
        assert_selects(r#"quantity("50M").compareTo(quantity("50Mi")) == -1"#, true);
        assert_selects(r#"quantity("500m").isInteger()"#, false);
        assert_selects(r#"quantity("500m") == quantity("1")"#, false);
        assert_selects(
            r#"quantity("500m").add(quantity("500m")) == quantity("1")"#,
            true,
        );
        assert_selects(r#"quantity("1.5").asApproximateFloat() == 1.5"#, true);
        assert_selects(r#"quantity("50k").sub(20000) == quantity("30k")"#, true);
        assert_selects(r#"isQuantity("1.3Gi") && !isQuantity("200K")"#, true);
        assert_fails(r#"quantity("500m").asInteger() == 1"#, "cannot convert");
        assert_fails(r#"quantity("Three") == quantity("3")"#, "not a quantity");
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("1Gi"), Ok(1 << 30));
        assert_eq!(parse_quantity("500m"), Ok(1), "rounds up");
        assert_eq!(parse_quantity("-500m"), Ok(-1), "away from zero");
        assert_eq!(parse_quantity("1e3"), Ok(1000));
        assert_eq!(parse_quantity("1E-3"), Ok(1));
        assert_eq!(parse_quantity("2k"), Ok(2000));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("+.5Ki"), Ok(512));
        assert_eq!(parse_quantity("0"), Ok(0));
        assert_eq!(parse_quantity("100n"), Ok(1));
        assert_eq!(
            parse_quantity("16Ei"),
            Ok(i64::MAX),
            "capped like Kubernetes"
        );
        assert_eq!(parse_nanos("1u"), Ok(1000));
        assert_eq!(parse_nanos("1e-12"), Ok(1), "rounded up to 1n");
        for bad in ["", "Gi", "200K", "1.1.1", "1 ", "1e", "1ki", "five", "0x10"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?}");
        }
        assert!(parse_quantity("1e30").is_err(), "out of range");
        assert!(parse_quantity("10E").is_err(), "past int64");
    }

    #[test]
    fn compares_versions() {
        let driver = r#"device.attributes["gpu.nvidia.com"].driverVersion"#;
        assert_selects(
            &format!(r#"{driver}.isGreaterThan(semver("550.0.0"))"#),
            true,
        );
        assert_selects(
            &format!(r#"{driver}.isLessThan(semver("550.54.15"))"#),
            false,
        );
        assert_selects(
            &format!(r#"{driver}.compareTo(semver("550.54.15")) == 0"#),
            true,
        );
        assert_selects(&format!(r#"{driver} == semver("550.54.15+build.7")"#), true);
        assert_selects(
            &format!(r#"{driver}.major() == 550 && {driver}.minor() == 54"#),
            true,
        );
        assert_selects(&format!(r#"{driver}.patch() == 15"#), true);
        assert_selects(
            r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("8.0.0")) > 0"#,
            true,
        );
        assert_selects(r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#, true);
        assert_selects(
            r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))"#,
            true,
        );
        assert_selects(
            r#"semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))"#,
            true,
        );
        assert_selects(r#"semver("1.0.0-2").isLessThan(semver("1.0.0-10"))"#, true);
        assert_selects(
            r#"isSemver("1.2.3") && !isSemver("v1.2.3") && !isSemver("1.2")"#,
            true,
        );
        assert_fails(r#"semver("01.2.3") == semver("1.2.3")"#, "leading zero");
    }

    #[test]
    fn quantity_and_version_methods_do_not_mix() {
        assert_fails(
            r#"quantity("1").compareTo(semver("1.0.0")) == 0"#,
            "no matching overload",
        );
        assert_fails(
            r#"device.attributes["gpu.nvidia.com"].index.isGreaterThan(2)"#,
            "no matching overload",
        );
        assert_selects(r#"quantity("1") == semver("1.0.0")"#, false);
    }

    #[test]
    fn missing_attribute_is_an_error() {
        assert_fails(
            r#"device.attributes["gpu.nvidia.com"].memoryBandwidth > 0"#,
            "No such key: memoryBandwidth",
        );
        assert_fails(r#"device.vendor == "nvidia""#, "No such key: vendor");
    }

    #[test]
    fn missing_domain_is_an_empty_map() {
        assert_fails(
            r#"device.attributes["dra.example.com"].model == "x""#,
            "No such key: model",
        );
        assert_selects(r#""model" in device.attributes["dra.example.com"]"#, false);
        assert_selects(r#"device.capacity["dra.example.com"].size() == 0"#, true);
        assert_selects(r#""dra.example.com" in device.attributes"#, false);
    }

    #[test]
    fn compares_attribute_maps() {
        assert_selects(r#"device.attributes == device.attributes"#, true);
        assert_selects(
            r#"cel.bind(a, device.attributes, a == device.attributes)"#,
            true,
        );
        assert_selects(r#"device.attributes == device.capacity"#, false);
        assert_selects(
            r#"device.capacity == {"gpu.nvidia.com": {"memory": quantity("80Gi")}}"#,
            true,
        );
    }

    #[test]
    fn tests_membership() {
        assert_selects(
            r#""productName" in device.attributes["gpu.nvidia.com"]"#,
            true,
        );
        assert_selects(r#""memory" in device.attributes["gpu.nvidia.com"]"#, false);
        assert_selects(
            r#"has(device.attributes["gpu.nvidia.com"].productName)"#,
            true,
        );
        assert_selects(r#"has(device.attributes["gpu.nvidia.com"].memory)"#, false);
        assert_selects(r#""gpu.nvidia.com" in device.attributes"#, true);
        assert_selects(r#"device.attributes.size() == 2"#, true);
        assert_selects(r#"device.attributes["gpu.nvidia.com"].size() == 6"#, true);
        assert_selects(
            r#"device.attributes.exists(d, d.endsWith(".kubernetes.io"))"#,
            true,
        );
        assert_selects(
            r#""productName" in device.attributes["gpu.nvidia.com"]
               && device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")"#,
            true,
        );
    }

    #[test]
    fn binds_names() {
        assert_selects(
            r#"cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.index == 3 && !gpu.mig)"#,
            true,
        );
        assert!(CelSelector::compile("cel.bind(1, 2, true)")
            .unwrap_err()
            .contains("simple name"));
    }

    #[test]
    fn result_must_be_bool() {
        assert_fails(r#"device.driver"#, "yields string, not bool");
        assert_fails(
            r#"device.attributes["gpu.nvidia.com"].index"#,
            "yields int, not bool",
        );
        assert_fails(
            r#"device.capacity["gpu.nvidia.com"].memory"#,
            "yields kubernetes.Quantity",
        );
    }

    #[test]
    fn compile_errors_say_what_is_wrong() {
        let error = CelSelector::compile(r#"device.driver == "a" &&"#).unwrap_err();
        assert!(
            error.starts_with("compilation failed: ERROR: <input>:1:"),
            "{error}"
        );
        let error = CelSelector::compile(r#"device.driver.matches("^gpu")"#).unwrap_err();
        assert!(error.contains("matches() is not supported"), "{error}");
        let long = format!("{}true", "true && ".repeat(MAX_EXPRESSION_LEN / 8));
        assert!(CelSelector::compile(&long)
            .unwrap_err()
            .contains("bytes long"));
    }

    #[test]
    fn deep_expressions_are_refused() {
        // Thousands of links, each a level of the tree: parsed on a stack of its own, then
        // refused rather than left to overflow the evaluator's.
        for chain in [
            format!("1{} == 1", "+1".repeat(5000)),
            format!("device{}.x", ".a".repeat(5000)),
        ] {
            let error = CelSelector::compile(&chain).unwrap_err();
            assert!(
                error.contains("levels deep, more than the 100 allowed"),
                "{error}"
            );
        }
        assert_selects(&format!("1{} == 91", " + 1".repeat(90)), true);
    }

    #[test]
    fn invalid_version_attribute_is_an_error() {
        let mut device = h100();
        device.attributes.insert(
            "gpu.nvidia.com/firmware".into(),
            AttributeValue::Version("1.2".into()),
        );
        let selector = CelSelector::compile("true").unwrap();
        let error = selector.matches(&device.view()).unwrap_err();
        assert!(
            error.contains("attribute gpu.nvidia.com/firmware"),
            "{error}"
        );
    }

    #[test]
    fn a_device_value_serves_many_selectors() {
        let device = h100();
        let value = DeviceValue::new(&device.view()).unwrap();
        let by_name = CelSelector::compile(
            r#"device.attributes["gpu.nvidia.com"].productName.contains("H100")"#,
        )
        .unwrap();
        let by_memory = CelSelector::compile(
            r#"device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("100Gi"))"#,
        )
        .unwrap();
        assert_eq!(by_name.matches_value(&value), Ok(true));
        assert_eq!(by_memory.matches_value(&value), Ok(false));
        assert_eq!(
            by_name.expression(),
            r#"device.attributes["gpu.nvidia.com"].productName.contains("H100")"#
        );
    }

    #[test]
    fn selectors_and_device_values_cross_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CelSelector>();
        shared::<DeviceValue<'_>>();
    }
}
