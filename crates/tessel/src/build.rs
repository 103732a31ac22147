//! `tessel build`: compile the selected steps and write the stages `--emit` names.

use crate::device;
use crate::frontend::{compile_steps, load, options};
use crate::CompileArgs;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// `tessel build`.
pub fn build(file: &Path, args: &CompileArgs, emit: &[String], out: &Path) -> Result<()> {
    const STAGES: [&str; 6] = ["ast", "graph", "fused", "lowered", "kernel", "ptx"];
    let emit: Vec<String> = emit.iter().map(|e| e.trim().to_string()).collect();
    for e in &emit {
        if !STAGES.contains(&e.as_str()) {
            bail!("--emit {e}: the stages are {}", STAGES.join(", "));
        }
    }
    let src = load(file)?;
    // main checked `out` before any work; it is made when the first file is written.
    let write = |name: String, text: String| -> Result<()> {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
        println!("wrote {}", p.display());
        Ok(())
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("module");
    if emit.iter().any(|e| e == "ast") {
        write(format!("{stem}.ast.tsl"), src.module.to_string())?;
    }
    for step in compile_steps(&src, args, &options())? {
        let c = &step.compiled;
        for e in &emit {
            let n = &step.name;
            match e.as_str() {
                "graph" => write(
                    format!("{n}.graph"),
                    tessel_ir::text::write_graph(&step.checked, None, None),
                )?,
                "fused" => write(
                    format!("{n}.fused.graph"),
                    tessel_ir::text::write_graph(&c.graph, Some(&c.fusion), Some(&c.schedules)),
                )?,
                "lowered" => write(
                    format!("{n}.lowered.kir"),
                    tessel_ir::text::write_program(&c.lowered),
                )?,
                "kernel" => write(
                    format!("{n}.kir"),
                    tessel_ir::text::write_program(&c.program),
                )?,
                "ptx" => write(format!("{n}.ptx"), device::ptx_of(&c.program)?)?,
                _ => {}
            }
        }
    }
    Ok(())
}
