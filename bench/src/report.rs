//! What a run measured: the table's rows and the raw figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One row of the table.
struct Row {
    figure: String,
    measured: String,
    target: String,
    met: Option<bool>,
}

/// Everything measured.
#[derive(Default)]
pub struct Results {
    rows: Vec<Row>,
    /// Raw figures, for docs and tests.
    pub figures: BTreeMap<String, f64>,
    /// Oracle checks passed (streams × collections × rounds).
    pub oracle_checks: u64,
}

impl Results {
    pub(crate) fn row(
        &mut self,
        figure: String,
        measured: String,
        target: &str,
        met: Option<bool>,
    ) {
        self.rows.push(Row {
            figure,
            measured,
            target: target.to_owned(),
            met,
        });
    }

    /// The table, as Markdown.
    pub fn table(&self) -> String {
        let mut s =
            String::from("| figure | measured | target | met |\n| --- | --- | --- | --- |\n");
        for r in &self.rows {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "—",
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.figure, r.measured, r.target, met
            );
        }
        s
    }
}
