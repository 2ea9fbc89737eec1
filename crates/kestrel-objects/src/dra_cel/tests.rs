use super::*;
use std::collections::BTreeMap;

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
    let by_name =
        CelSelector::compile(r#"device.attributes["gpu.nvidia.com"].productName.contains("H100")"#)
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
