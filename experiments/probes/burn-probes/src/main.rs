//! burn-probes: measure the autodiff graph bookkeeping of burn 0.22.1 on the Flex backend.
//!
//! One binary, one subcommand per probe. Probes whose variants need independent
//! baselines re-execute this binary once per variant (`--variant V --child`); the child
//! prints CSV rows (no header) on stdout, the parent collects them.
//!
//! Usage: burn-probes <probe> [--quick] [--out FILE] [--steps N] [--variant V]
//!        burn-probes all [--quick] --out-dir DIR
//!        burn-probes script --program FILE   (script.rs: live heap after each statement)

mod adleak;
mod leak;
mod leakfault;
mod bwcost;
mod ema;
mod mech;
mod mlp;
mod opcost;
mod pit;
mod rehash;
mod sample;
mod script;
mod sizeof;
mod trace;
mod tv;

use burn_probes::alloc::CountingAlloc;
use burn_probes::csv::{HEADER, Sink};
use std::io::Write;
use std::process::{Command, Stdio};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub quick: bool,
    pub steps: Option<usize>,
    pub variant: Option<String>,
    pub child: bool,
    pub out: Option<String>,
    pub out_dir: Option<String>,
}

const PROBES: &[&str] = &[
    "adleak-rss",
    "adleak-count",
    "pit-infer",
    "p10-ema",
    "p10-ema-adam",
    "sizeof",
    "alloc-trace",
    "params",
    "train-validate",
    "op-cost",
    "backward-cost",
    "mechanism-cost",
];

fn usage() -> ! {
    eprintln!(
        "usage: burn-probes <probe> [--quick] [--out FILE] [--steps N] [--variant V]\n       burn-probes all [--quick] --out-dir DIR\nprobes: {}",
        PROBES.join(", ")
    );
    std::process::exit(2);
}

/// Variants run in a fresh process each (None: run in this process).
fn process_variants(probe: &str, opts: &Opts) -> Option<Vec<String>> {
    let v = |xs: &[&str]| Some(xs.iter().map(|s| s.to_string()).collect());
    match probe {
        "adleak-rss" => v(adleak::RSS_VARIANTS),
        "adleak-count" => v(adleak::COUNT_VARIANTS),
        "p10-ema" => v(ema::MODES),
        "p10-ema-adam" => v(ema::ADAM_MODES),
        "alloc-trace" => v(trace::CASES),
        "params" => Some(adleak::param_points(opts.quick)),
        "train-validate" => v(tv::VARIANTS),
        "op-cost" => Some(opcost::variants()),
        "backward-cost" => v(bwcost::OPS),
        "mechanism-cost" => v(mech::VARIANTS),
        _ => None,
    }
}

fn run_variant(probe: &str, variant: &str, opts: &Opts, sink: &mut Sink) {
    match probe {
        "adleak-rss" => adleak::rss_variant(variant, opts, sink),
        "adleak-count" => adleak::count_variant(variant, opts, sink),
        "p10-ema" => ema::run_mode("p10-ema", variant, ema::Optim::Sgd, opts, sink, true, false),
        "p10-ema-adam" => ema::run_mode("p10-ema-adam", variant, ema::Optim::Adam, opts, sink, true, false),
        "alloc-trace" => trace::run_case(variant, opts, sink),
        "params" => adleak::param_point(variant, opts, sink),
        "train-validate" => tv::run_variant(variant, opts, sink),
        "op-cost" => opcost::run_variant(variant, opts, sink),
        "backward-cost" => bwcost::run_variant(variant, opts, sink),
        "mechanism-cost" => mech::run_variant(variant, opts, sink),
        _ => usage(),
    }
}

fn run_inprocess(probe: &str, opts: &Opts, sink: &mut Sink) {
    match probe {
        "pit-infer" => pit::run(opts, sink),
        "sizeof" => sizeof::run(opts, sink),
        _ => usage(),
    }
}

/// Run one probe; returns (csv lines without header, ok).
fn run_probe(probe: &str, opts: &Opts) -> (String, bool) {
    let mut sink = Sink::new(probe, opts.quick);
    if let Some(v) = &opts.variant {
        run_variant(probe, v, opts, &mut sink);
        return (sink.lines(), true);
    }
    match process_variants(probe, opts) {
        None => {
            run_inprocess(probe, opts, &mut sink);
            (sink.lines(), true)
        }
        Some(variants) => {
            let exe = std::env::current_exe().expect("current_exe");
            let mut out = String::new();
            let mut ok = true;
            for v in variants {
                eprintln!("[{probe}] variant {v} (fresh process)");
                let mut cmd = Command::new(&exe);
                cmd.arg(probe).arg("--variant").arg(&v).arg("--child");
                if opts.quick {
                    cmd.arg("--quick");
                }
                if let Some(s) = opts.steps {
                    cmd.arg("--steps").arg(s.to_string());
                }
                cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
                let t = std::time::Instant::now();
                let res = cmd.output();
                match res {
                    Ok(o) => {
                        out.push_str(&String::from_utf8_lossy(&o.stdout));
                        if !o.status.success() {
                            eprintln!("[{probe}] variant {v} FAILED: {}", o.status);
                            ok = false;
                        }
                    }
                    Err(e) => {
                        eprintln!("[{probe}] variant {v} could not start: {e}");
                        ok = false;
                    }
                }
                eprintln!("[{probe}] variant {v} took {:.1} s", t.elapsed().as_secs_f64());
            }
            (out, ok)
        }
    }
}

/// Experiments that are raw traces (several events per x, e.g. one row per allocation)
/// rather than observations: written to their own file `<experiment>.csv` next to the
/// probe's CSV, so that the probe's CSV holds only points a simulator can be compared with.
const TRACE_EXPERIMENTS: &[&str] = &["alloc-trace-events", "sizeof-alloc"];

/// Write the probe's rows to `path`, and the rows of trace experiments to
/// `<dir of path>/<experiment>.csv`.
fn write_outputs(path: &str, lines: &str) -> std::io::Result<()> {
    let mut main = String::new();
    let mut traces: Vec<(&str, String)> = Vec::new();
    for line in lines.lines() {
        let exp = line.split(',').next().unwrap_or("");
        if let Some(name) = TRACE_EXPERIMENTS.iter().find(|t| **t == exp) {
            match traces.iter_mut().find(|(n, _)| n == name) {
                Some((_, s)) => {
                    s.push_str(line);
                    s.push('\n');
                }
                None => traces.push((name, format!("{line}\n"))),
            }
        } else {
            main.push_str(line);
            main.push('\n');
        }
    }
    write_csv(path, &main)?;
    let dir = std::path::Path::new(path).parent().map(|d| d.to_path_buf()).unwrap_or_default();
    for (name, body) in traces {
        let p = dir.join(format!("{name}.csv"));
        write_csv(&p.to_string_lossy(), &body)?;
        eprintln!("[trace] {name} -> {}", p.display());
    }
    Ok(())
}

/// Write header + lines to `path` atomically (tmp file then rename).
fn write_csv(path: &str, lines: &str) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{HEADER}")?;
        f.write_all(lines.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        usage();
    }
    let probe = args[0].clone();
    if probe == "script" {
        // not a CSV probe: the differential conformance test's runner (script.rs)
        match (args.get(1).map(String::as_str), args.get(2)) {
            (Some("--program"), Some(path)) if args.len() == 3 => script::run(path),
            _ => {
                eprintln!("usage: burn-probes script --program FILE");
                std::process::exit(2)
            }
        }
        return;
    }
    let mut opts = Opts::default();
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        let mut val = || {
            i += 1;
            args.get(i).cloned().unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--quick" => opts.quick = true,
            "--child" => opts.child = true,
            "--steps" => {
                let s = val();
                opts.steps = Some(s.parse().unwrap_or_else(|_| {
                    eprintln!("error: --steps wants a positive integer, got {s:?}");
                    std::process::exit(2)
                }));
            }
            "--variant" => opts.variant = Some(val()),
            "--out" => opts.out = Some(val()),
            "--out-dir" => opts.out_dir = Some(val()),
            "-h" | "--help" => usage(),
            other => {
                eprintln!("error: unknown argument {other:?}");
                usage()
            }
        }
        i += 1;
    }

    if probe == "all" {
        let dir = opts.out_dir.clone().unwrap_or_else(|| {
            eprintln!("error: all needs --out-dir DIR");
            std::process::exit(2)
        });
        std::fs::create_dir_all(&dir).expect("create out dir");
        let mut all_ok = true;
        for p in PROBES {
            let t = std::time::Instant::now();
            let (lines, ok) = run_probe(p, &opts);
            all_ok &= ok;
            let path = format!("{dir}/{p}.csv");
            write_outputs(&path, &lines).expect("write csv");
            eprintln!("[all] {p} -> {path} ({:.1} s)", t.elapsed().as_secs_f64());
        }
        std::process::exit(if all_ok { 0 } else { 1 });
    }

    if !PROBES.contains(&probe.as_str()) {
        eprintln!("error: unknown probe {probe:?}");
        usage();
    }
    let (lines, ok) = run_probe(&probe, &opts);
    if opts.child {
        print!("{lines}");
        std::io::stdout().flush().ok();
    } else if let Some(path) = &opts.out {
        write_outputs(path, &lines).expect("write csv");
    } else {
        print!("{HEADER}\n{lines}");
    }
    std::process::exit(if ok { 0 } else { 1 });
}
