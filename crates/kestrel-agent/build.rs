//! Compiles the vendored kubelet protos with protox (pure Rust), so building Kestrel needs
//! no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/deviceplugin_v1beta1.proto",
        "proto/podresources_v1.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    // Both sides of each API: the agent serves DevicePlugin and calls Registration and
    // PodResourcesLister; the tests' fake kubelet does the opposite.
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
