//! Template strings: text with `{{ expression }}` parts rendered against
//! install state (`{{ install.id }}`, `{{ inputs.domain }}`,
//! `{{ components.database.outputs.endpoint }}`, `{{ secrets.db_password }}`).
//!
//! This crate does not render templates; it only finds their expressions so
//! validation can check the literal parts of a templated value.

/// A template whose `{{` has no matching `}}`, or whose expression is empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` at the byte offset has no closing `}}`.
    #[error("unterminated template expression at byte {0}")]
    Unterminated(usize),
    /// `{{ }}` at the byte offset contains nothing.
    #[error("empty template expression at byte {0}")]
    Empty(usize),
}

/// The trimmed expressions of a template, in order.
///
/// ```
/// use outpost_api::template::expressions;
/// assert_eq!(expressions("{{ install.id }}-role").unwrap(), vec!["install.id"]);
/// ```
pub fn expressions(text: &str) -> Result<Vec<&str>, TemplateError> {
    let mut found = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(TemplateError::Unterminated(offset + start))?;
        let expression = after[..end].trim();
        if expression.is_empty() {
            return Err(TemplateError::Empty(offset + start));
        }
        found.push(expression);
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    Ok(found)
}

/// `text` with every `{{ ... }}` expression replaced by `placeholder`, so the
/// literal parts can be checked as if the template had been rendered.
///
/// ```
/// use outpost_api::template::with_placeholder;
/// assert_eq!(with_placeholder("{{ install.id }}-role", "x").unwrap(), "x-role");
/// ```
pub fn with_placeholder(text: &str, placeholder: &str) -> Result<String, TemplateError> {
    expressions(text)?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        out.push_str(placeholder);
        // `expressions` succeeded, so every `{{` has a closing `}}`.
        let end = rest[start..]
            .find("}}")
            .map_or(rest.len(), |e| start + e + 2);
        rest = &rest[end..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_expressions_in_order() {
        assert_eq!(expressions("{{a}}-{{ b.c }}-x").unwrap(), vec!["a", "b.c"],);
        assert_eq!(expressions("plain").unwrap(), Vec::<&str>::new());
    }

    #[test]
    fn rejects_unterminated_and_empty() {
        assert_eq!(expressions("ab{{ x"), Err(TemplateError::Unterminated(2)));
        assert_eq!(expressions("{{x}}{{  }}"), Err(TemplateError::Empty(5)));
    }

    #[test]
    fn replaces_expressions() {
        assert_eq!(
            with_placeholder("{{ install.id }}-eks-{{ x }}", "p").unwrap(),
            "p-eks-p"
        );
        assert!(with_placeholder("{{ open", "p").is_err());
    }
}
