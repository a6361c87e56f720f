//! The URLs a sink spec names (an http sink's target, an AWS endpoint override), checked once.

use reqwest::Url;

/// An absolute `http` or `https` URL with a host.
pub fn parse_http_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("not a valid URL: {e}: {raw:?}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme must be http or https, not {:?}: {raw:?}", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("the URL has no host: {raw:?}"));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_validation_names_the_problem() {
        assert!(parse_http_url("http://127.0.0.1:8080/events").is_ok());
        assert!(parse_http_url("https://sink.example/x").is_ok());
        assert!(parse_http_url("not a url").unwrap_err().contains("not a valid URL"));
        assert!(parse_http_url("ftp://host/x").unwrap_err().contains("scheme"));
        assert!(parse_http_url("http://").unwrap_err().contains("not a valid URL"));
    }
}
