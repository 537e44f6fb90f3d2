//! `-o table|json|yaml`: how the CLI verbs print what they read.

use serde::Serialize;

/// An output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Prints `value` as JSON or YAML, or `rows` (the first one the header) as a table.
pub fn print<T: Serialize>(
    format: Format,
    value: &T,
    rows: Vec<Vec<String>>,
) -> anyhow::Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", serde_saphyr::to_string(value)?),
        Format::Table => print!("{}", table(&rows)),
    }
    Ok(())
}

/// Left-aligned columns separated by three spaces, like `kubectl get`.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 < row.len() {
                line.push_str(&format!("{cell:<width$}   ", width = widths[c]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How long ago `time` was, like kubectl's AGE column (`5s`, `3m`, `2h`, `4d`).
pub fn age(time: jiff::Timestamp) -> String {
    let seconds = (jiff::Timestamp::now().as_second() - time.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}
