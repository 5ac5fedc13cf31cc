//! CSV rows in the measured schema of seeds-m2max.csv plus platform, burn_version, probe.

use std::fmt::Write as _;

pub const HEADER: &str =
    "experiment,variant,phase,x,x_unit,metric,value,unit,note,platform,burn_version,probe";
pub const BURN_VERSION: &str = "0.22.1";

pub fn platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

#[derive(Clone, Debug)]
pub struct Row {
    pub experiment: String,
    pub variant: String,
    pub phase: String,
    pub x: String,
    pub x_unit: String,
    pub metric: String,
    pub value: String,
    pub unit: String,
    pub note: String,
}

fn field(out: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&s.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(s);
    }
}

impl Row {
    pub fn to_line(&self, probe: &str) -> String {
        let mut out = String::new();
        let plat = platform();
        let fields = [
            &self.experiment[..],
            &self.variant,
            &self.phase,
            &self.x,
            &self.x_unit,
            &self.metric,
            &self.value,
            &self.unit,
            &self.note,
            &plat,
            BURN_VERSION,
            probe,
        ];
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            field(&mut out, f);
        }
        out
    }
}

/// Collects rows for one probe run. `quick` appends a marker to every note.
pub struct Sink {
    pub probe: String,
    pub quick: bool,
    pub rows: Vec<Row>,
    /// Echo each row to stderr as it is recorded.
    pub echo: bool,
}

impl Sink {
    pub fn new(probe: &str, quick: bool) -> Self {
        Sink { probe: probe.to_string(), quick, rows: Vec::new(), echo: true }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        experiment: &str,
        variant: &str,
        phase: &str,
        x: impl ToString,
        x_unit: &str,
        metric: &str,
        value: impl ToString,
        unit: &str,
        note: &str,
    ) {
        // The rows stay in memory until the probe ends; keep their heap out of the
        // counting allocator's snapshots (pit-infer and p10-ema snapshot the live heap
        // after rows were recorded: without this, 38 blocks / 3.9 KiB of rows and row-
        // vector growth showed up in pit-infer's group B at 100 forwards).
        crate::alloc::exclude(|| {
            self.row_inner(experiment, variant, phase, x, x_unit, metric, value, unit, note)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn row_inner(
        &mut self,
        experiment: &str,
        variant: &str,
        phase: &str,
        x: impl ToString,
        x_unit: &str,
        metric: &str,
        value: impl ToString,
        unit: &str,
        note: &str,
    ) {
        let mut note = note.to_string();
        if self.quick {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str("quick mode: loop counts cut ~10x");
        }
        let row = Row {
            experiment: experiment.into(),
            variant: variant.into(),
            phase: phase.into(),
            x: x.to_string(),
            x_unit: x_unit.into(),
            metric: metric.into(),
            value: value.to_string(),
            unit: unit.into(),
            note,
        };
        if self.echo {
            let short: String = row.note.chars().take(70).collect();
            eprintln!("  {} | {} | {} {} | {} = {} {} | {}", row.experiment, row.variant, row.x, row.x_unit, row.metric, row.value, row.unit, short);
        }
        self.rows.push(row);
    }

    /// Rows as CSV lines (no header).
    pub fn lines(&self) -> String {
        let mut s = String::new();
        let probe = if self.quick { format!("{} --quick", self.probe) } else { self.probe.clone() };
        for r in &self.rows {
            let _ = writeln!(s, "{}", r.to_line(&probe));
        }
        s
    }
}

/// Format a float with `d` decimals.
pub fn f(v: f64, d: usize) -> String {
    format!("{v:.d$}")
}
