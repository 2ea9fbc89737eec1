//! A compiled selector and what it reads of a device: `CelSelector`, `DeviceView`, `Reads`.

use std::collections::BTreeMap;
use std::fmt;
use std::thread;

use super::*;
use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use cel::common::types::CelBool;
use cel::{Context, Program, Value};

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
