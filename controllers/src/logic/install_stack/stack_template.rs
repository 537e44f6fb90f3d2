//! A CloudFormation template being assembled: its sections, with every
//! logical id checked for uniqueness in its namespace.

use super::StackError;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// CloudFormation's namespaces of logical ids: parameters and resources are
/// both targets of `Ref`, so they share one; conditions and outputs have their
/// own.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Namespace {
    Ref,
    Condition,
    Output,
}

/// The sections of a template, filled by the role, runner and secret parts.
#[derive(Default)]
pub(super) struct StackTemplate {
    parameters: Map<String, Value>,
    conditions: Map<String, Value>,
    resources: Map<String, Value>,
    outputs: Map<String, Value>,
    /// Template metadata besides the console's parameter groups.
    metadata: Map<String, Value>,
    /// `(label, parameter ids)` in the order the console shows them.
    parameter_groups: Vec<(String, Vec<String>)>,
    /// Who declared each logical id, for the duplicate error.
    owners: BTreeMap<(Namespace, String), String>,
}

impl StackTemplate {
    fn claim(&mut self, namespace: Namespace, id: &str, owner: &str) -> Result<(), StackError> {
        if let Some(first) = self.owners.get(&(namespace, id.to_owned())) {
            return Err(StackError::DuplicateLogicalId {
                id: id.to_owned(),
                first: first.clone(),
                second: owner.to_owned(),
            });
        }
        self.owners
            .insert((namespace, id.to_owned()), owner.to_owned());
        Ok(())
    }

    /// Adds parameter `id` to the console group `group`.
    pub(super) fn parameter(
        &mut self,
        group: &str,
        id: &str,
        owner: &str,
        parameter: Value,
    ) -> Result<(), StackError> {
        self.claim(Namespace::Ref, id, owner)?;
        self.parameters.insert(id.to_owned(), parameter);
        match self.parameter_groups.iter_mut().find(|(l, _)| l == group) {
            Some((_, ids)) => ids.push(id.to_owned()),
            None => self
                .parameter_groups
                .push((group.to_owned(), vec![id.to_owned()])),
        }
        Ok(())
    }

    /// Sets the template metadata entry `key` (CloudFormation keeps it as written).
    pub(super) fn metadata(&mut self, key: &str, value: Value) {
        self.metadata.insert(key.to_owned(), value);
    }

    pub(super) fn condition(
        &mut self,
        id: &str,
        owner: &str,
        condition: Value,
    ) -> Result<(), StackError> {
        self.claim(Namespace::Condition, id, owner)?;
        self.conditions.insert(id.to_owned(), condition);
        Ok(())
    }

    pub(super) fn resource(
        &mut self,
        id: &str,
        owner: &str,
        resource: Value,
    ) -> Result<(), StackError> {
        self.claim(Namespace::Ref, id, owner)?;
        self.resources.insert(id.to_owned(), resource);
        Ok(())
    }

    pub(super) fn output(
        &mut self,
        id: &str,
        owner: &str,
        output: Value,
    ) -> Result<(), StackError> {
        self.claim(Namespace::Output, id, owner)?;
        self.outputs.insert(id.to_owned(), output);
        Ok(())
    }

    /// The template document. Sections that would be empty are left out, as
    /// CloudFormation rejects an empty `Conditions` or `Outputs` map.
    pub(super) fn into_value(self, description: String, rules: Value) -> Value {
        let groups: Vec<Value> = self
            .parameter_groups
            .into_iter()
            .map(|(label, ids)| json!({"Label": {"default": label}, "Parameters": ids}))
            .collect();
        let mut template = Map::new();
        template.insert("AWSTemplateFormatVersion".into(), json!("2010-09-09"));
        template.insert("Description".into(), Value::String(description));
        let mut metadata = self.metadata;
        metadata.insert(
            "AWS::CloudFormation::Interface".into(),
            json!({"ParameterGroups": groups}),
        );
        template.insert("Metadata".into(), Value::Object(metadata));
        template.insert("Parameters".into(), Value::Object(self.parameters));
        template.insert("Rules".into(), rules);
        for (section, map) in [
            ("Conditions", self.conditions),
            ("Resources", self.resources),
            ("Outputs", self.outputs),
        ] {
            if !map.is_empty() {
                template.insert(section.into(), Value::Object(map));
            }
        }
        Value::Object(template)
    }
}
