//! Typed access to a node's attributes, with ONNX defaults and clear errors.

use std::collections::HashMap;

use crate::error::{EngineError, Result};
use crate::onnx::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, attribute_type as at};

/// A node's attributes by name.
pub(crate) struct Attrs<'a> {
    map: HashMap<&'a str, &'a AttributeProto>,
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(n: &'a NodeProto) -> Result<Attrs<'a>> {
        let mut map = HashMap::new();
        for a in &n.attribute {
            if !a.ref_attr_name.is_empty() {
                return Err(EngineError::unsupported(format!(
                    "attribute '{}' refers to a function attribute",
                    a.name
                )));
            }
            map.insert(a.name.as_str(), a);
        }
        Ok(Attrs { map })
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    fn get(&self, name: &str, want: i32, what: &str) -> Result<Option<&'a AttributeProto>> {
        match self.map.get(name) {
            None => Ok(None),
            Some(a) if a.r#type == want || a.r#type == 0 => Ok(Some(a)),
            Some(a) => Err(EngineError::invalid(format!(
                "attribute '{name}' should be {what} (type {want}), found type {}",
                a.r#type
            ))),
        }
    }

    pub(crate) fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.get(name, at::INT, "an int")?.map_or(default, |a| a.i))
    }

    pub(crate) fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.get(name, at::FLOAT, "a float")?.map_or(default, |a| a.f))
    }

    pub(crate) fn opt_float(&self, name: &str) -> Result<Option<f32>> {
        Ok(self.get(name, at::FLOAT, "a float")?.map(|a| a.f))
    }

    pub(crate) fn string(&self, name: &str, default: &str) -> Result<String> {
        Ok(self.get(name, at::STRING, "a string")?.map_or_else(
            || default.to_string(),
            |a| String::from_utf8_lossy(&a.s).into_owned(),
        ))
    }

    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self
            .get(name, at::INTS, "a list of ints")?
            .map(|a| a.ints.clone()))
    }

    pub(crate) fn floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self
            .get(name, at::FLOATS, "a list of floats")?
            .map(|a| a.floats.clone()))
    }

    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<String>>> {
        Ok(self.get(name, at::STRINGS, "a list of strings")?.map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        }))
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<Option<&'a TensorProto>> {
        Ok(self.get(name, at::TENSOR, "a tensor")?.and_then(|a| a.t.as_ref()))
    }

    pub(crate) fn graph(&self, name: &str) -> Result<Option<&'a GraphProto>> {
        Ok(self.get(name, at::GRAPH, "a graph")?.and_then(|a| a.g.as_ref()))
    }

    pub(crate) fn usizes(&self, name: &str) -> Result<Vec<usize>> {
        match self.ints(name)? {
            None => Ok(Vec::new()),
            Some(v) => v
                .into_iter()
                .map(|x| {
                    usize::try_from(x).map_err(|_| {
                        EngineError::invalid(format!("attribute '{name}' has a negative value {x}"))
                    })
                })
                .collect(),
        }
    }
}
