//! `-o text|json|yaml`: text for people, JSON and YAML for programs (the
//! same fields, in the API's camelCase).

use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables and summaries for people.
    #[default]
    Text,
    Json,
    Yaml,
}

/// Prints `value` as JSON or YAML, or calls `text` for the text form.
pub fn print<T: Serialize>(
    format: Format,
    value: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<()> {
    let rendered = match format {
        Format::Text => text(value),
        Format::Json => {
            let mut json =
                serde_json::to_string_pretty(value).map_err(|e| Error::Output(e.to_string()))?;
            json.push('\n');
            json
        }
        Format::Yaml => serde_saphyr::to_string(value).map_err(|e| Error::Output(e.to_string()))?,
    };
    print!("{rendered}");
    Ok(())
}

/// Rows under a header, each column as wide as its widest cell (the last
/// one unpadded), two spaces apart: kubectl's table layout.
pub fn table(indent: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::from(indent);
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The continuous backup window in one line, if anything is recorded.
pub fn continuous_line(
    continuous: Option<&dkv_api::distributedkv::v1beta1::ContinuousBackupStatus>,
    now: jiff::Timestamp,
) -> Option<String> {
    let c = continuous?;
    let (oldest, newest) = (c.oldest.as_ref()?, c.newest.as_ref()?);
    let mut line = format!(
        "restorable from revision {} ({}) to revision {} ({})",
        oldest.revision, oldest.time.0, newest.revision, newest.time.0
    );
    if let Some(last) = &c.last_segment_time {
        line.push_str(&format!(
            ", last segment stored {}",
            crate::time::ago(last, now)
        ));
    }
    if !c.gaps.is_empty() {
        let gaps: Vec<String> = c
            .gaps
            .iter()
            .map(|g| format!("{}..{}", g.after_revision, g.until_revision))
            .collect();
        line.push_str(&format!(
            "; not restorable between revisions {}",
            gaps.join(", ")
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_leave_the_last_unpadded() {
        let rows = vec![
            vec!["orders-0".to_owned(), "yes".to_owned(), "leader".to_owned()],
            vec!["orders-10".to_owned(), "no".to_owned(), "".to_owned()],
        ];
        assert_eq!(
            table("  ", &["NAME", "HEALTHY", "ROLE"], &rows),
            "  NAME       HEALTHY  ROLE\n  orders-0   yes      leader\n  orders-10  no\n"
        );
    }
}
