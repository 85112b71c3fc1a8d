//! Compiles `stepd/v1/*.proto` with protox (pure Rust, no system `protoc`) and
//! writes the encoded descriptor set that the server serves through reflection.

use std::{env, fs, path::PathBuf};

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let dir = root.join("stepd/v1");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed={}", dir.display());

    let fds = protox::Compiler::new([&root])?
        .include_imports(true)
        .include_source_info(true)
        .open_files(files.iter().map(|p| p.strip_prefix(&root).unwrap_or(p)))?
        .file_descriptor_set();

    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("stepd_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Clients are built from a shared Channel; the generated `connect`
        // constructor would also clash with `ProbeService.Connect`.
        .build_transport(false)
        // Small initial buffers for every call (why: in src/codec.rs).
        .codec_path("crate::codec::LeanCodec")
        // Type names let clients look messages up in the descriptor pool (for
        // JSON in the protobuf mapping) without a hand-kept table.
        .compile_fds_with_config(fds, {
            let mut config = prost_build::Config::new();
            config.enable_type_names();
            for variant in BOXED_PAYLOADS {
                config.boxed(format!(".stepd.v1.Event.payload.{variant}"));
            }
            config
        })?;
    Ok(())
}

/// The event payloads far larger than the rest. An event is as large as its
/// largest payload, and the daemon keeps hundreds of thousands of events in
/// its replay rings, most of them small probe reports.
const BOXED_PAYLOADS: [&str; 5] = [
    "stopped",
    "session_started",
    "session_updated",
    "trace",
    "breakpoint_updated",
];
