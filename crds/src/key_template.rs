//! The s3 sink's `keyTemplate`: time partitions between the prefix and an object's name.
//!
//! Why here: the operator (at apply, as a condition) and the reader (at start, exit 2) must judge a
//! template the same way, and the reader renders it with the same pieces, so the one parser lives
//! with the API. The CRD's CEL rule refuses the same templates a step earlier.

/// One piece of a template: literal text or a UTC calendar field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `{yyyy}`: four digits.
    Year,
    /// `{MM}`: 01-12.
    Month,
    /// `{dd}`: 01-31.
    Day,
    /// `{HH}`: 00-23.
    Hour,
}

/// The placeholders a template may hold, as written.
pub const PLACEHOLDERS: [&str; 4] = ["{yyyy}", "{MM}", "{dd}", "{HH}"];

/// Parse `template`; the error says what to change (without the field name, which the caller adds).
pub fn parse(template: &str) -> Result<Vec<Piece>, String> {
    if template.starts_with('/') || template.ends_with('/') || template.contains("//") {
        return Err(format!(
            "{template:?} has an empty path segment: remove the leading, trailing or doubled /"
        ));
    }
    if template.split('/').any(|s| s == "." || s == ".." || s.contains("..")) {
        return Err(format!("{template:?} contains '..': use plain names"));
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('{') {
            let end = after.find('}').ok_or_else(|| format!("{template:?} has an unclosed {{"))?;
            pieces.push(match &after[..end] {
                "yyyy" => Piece::Year,
                "MM" => Piece::Month,
                "dd" => Piece::Day,
                "HH" => Piece::Hour,
                other => {
                    return Err(format!(
                        "{template:?} has the unknown placeholder {{{other}}}: use {}",
                        PLACEHOLDERS.join(" ")
                    ));
                }
            });
            rest = &after[end + 1..];
            continue;
        }
        let end = rest.find('{').unwrap_or(rest.len());
        let text = &rest[..end];
        if let Some(bad) = text.chars().find(|c| !(c.is_ascii_alphanumeric() || "_=.-/".contains(*c))) {
            return Err(format!(
                "{template:?} has {bad:?}: use letters, digits, _ = . - and / between segments"
            ));
        }
        pieces.push(Piece::Text(text.to_owned()));
        rest = &rest[end..];
    }
    Ok(pieces)
}

/// `pieces` rendered for the instant `unix_ms` (UTC).
pub fn render(pieces: &[Piece], unix_ms: i64) -> String {
    let (year, month, day, hour) = civil(unix_ms);
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Year => out.push_str(&format!("{year:04}")),
            Piece::Month => out.push_str(&format!("{month:02}")),
            Piece::Day => out.push_str(&format!("{day:02}")),
            Piece::Hour => out.push_str(&format!("{hour:02}")),
        }
    }
    out
}

/// The literal text before the first placeholder: every rendering starts with it.
pub fn fixed_start(pieces: &[Piece]) -> String {
    match pieces.first() {
        Some(Piece::Text(text)) => text.clone(),
        _ => String::new(),
    }
}

/// UTC (year, month, day, hour) of `unix_ms` (the proleptic Gregorian calendar; H. Hinnant's
/// `civil_from_days`).
fn civil(unix_ms: i64) -> (i64, u32, u32, u32) {
    let secs = unix_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let hour = (secs.rem_euclid(86_400) / 3600) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, hour)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hourly_and_hive_templates_render_in_utc() {
        // 2026-12-02T17:05:00Z
        let at = 1_796_231_100_000;
        assert_eq!(render(&parse("{yyyy}/{MM}/{dd}/{HH}").unwrap(), at), "2026/12/02/17");
        assert_eq!(render(&parse("dt={yyyy}-{MM}-{dd}/hour={HH}").unwrap(), at), "dt=2026-12-02/hour=17");
        assert_eq!(render(&parse("dt={yyyy}-{MM}-{dd}").unwrap(), 0), "dt=1970-01-01");
        // 2024-02-29T23:59:59Z: a leap day, the last second of its hour.
        assert_eq!(render(&parse("{yyyy}{MM}{dd}{HH}").unwrap(), 1_709_251_199_000), "2024022923");
        assert_eq!(fixed_start(&parse("logs/dt={yyyy}").unwrap()), "logs/dt=");
        assert_eq!(fixed_start(&parse("{yyyy}").unwrap()), "");
    }

    #[test]
    fn bad_templates_say_what_to_change() {
        for (template, says) in [
            ("{yyyy}/{mm}", "unknown placeholder {mm}"),
            ("{yyyy", "unclosed"),
            ("/{yyyy}", "empty path segment"),
            ("a//b", "empty path segment"),
            ("a/../b", "'..'"),
            ("a b", "' '"),
        ] {
            let error = parse(template).unwrap_err();
            assert!(error.contains(says), "{template}: {error}");
        }
    }
}
