//! Typed routing rules and Triton model configs for infergate: parsing, validation with file:line:column errors, and hot reload.
