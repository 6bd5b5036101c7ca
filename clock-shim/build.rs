//! Compiles `src/shim.c` into the preloadable library `libhermes_clock_shim.so` in `OUT_DIR`, with
//! the C compiler the Rust toolchain links with (found by the `cc` crate), and tells the crate
//! where it is (`CLOCK_SHIM_BUILT`). Only Linux preloads this way; elsewhere nothing is built and
//! the crate says so at run time.

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "src/shim.c";
/// The library's file name, also read by `src/lib.rs`.
const LIBRARY: &str = "libhermes_clock_shim.so";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        println!("cargo:rustc-env=CLOCK_SHIM_BUILT=");
        return;
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out_dir.join(LIBRARY);
    let compiler = cc::Build::new()
        .pic(true)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .get_compiler();
    let mut command: Command = compiler.to_command();
    command
        .args(["-shared", "-Wl,-z,defs", "-o"])
        .arg(&library)
        .arg(SOURCE)
        .arg("-ldl");
    let shown = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| word.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let status = command
        .status()
        .unwrap_or_else(|error| panic!("cannot run the C compiler (`{shown}`): {error}"));
    assert!(
        status.success(),
        "building the clock shim failed ({status}): `{shown}`"
    );
    println!("cargo:rustc-env=CLOCK_SHIM_BUILT={}", library.display());
}
