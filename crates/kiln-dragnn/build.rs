//! Build script: compiles `proto/spec.proto` without `protoc`. `protox` parses it into a
//! `FileDescriptorSet`; `prost-build` generates the Rust message types from that set
//! (`$OUT_DIR/syntaxnet.dragnn.rs`); the encoded set is written to
//! `$OUT_DIR/spec_descriptor.bin`, from which `prost-reflect` reads and writes the text and
//! JSON forms at run time (see `src/spec.rs`).
//!
//! Depends on `protox` and `prost-build`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let proto_dir = manifest_dir.join("proto");
    println!("cargo:rerun-if-changed=proto/spec.proto");
    println!("cargo:rerun-if-changed=build.rs");

    let mut compiler = protox::Compiler::new([&proto_dir])?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_file("spec.proto")?;
    std::fs::write(
        out_dir.join("spec_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    prost_build::Config::new()
        .out_dir(&out_dir)
        .btree_map(["."])
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
