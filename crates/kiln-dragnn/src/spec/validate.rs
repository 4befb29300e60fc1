//! Validation of a [`MasterSpec`]: the rules a spec must meet before a compute session is
//! built from it, each broken rule reported as [`SpecError::Invalid`] naming the component and
//! the field (`linked_feature[1].source_component`). The names the runtime knows (translators,
//! transition systems, backends) are listed here as constants.
//!
//! Depends on the message types of [`crate::spec`] and on [`super::fml`].

use super::fml::fml_templates;
use super::{
    ComponentSpec, FixedFeatureChannel, LinkedFeatureChannel, MasterSpec, RegisteredModuleSpec,
    SpecError,
};

/// The translators a linked feature may name in `source_translator`.
pub const TRANSLATORS: &[&str] = &[
    "identity",
    "history",
    "reverse-token",
    "reverse-char",
    "shift-reduce-step",
    "reduce-step",
    "parent-shift-reduce-step",
];

/// The translators a recurrent link (a linked feature whose source is its own component) may
/// use: those whose step comes from the steps already taken (`history`) or from the state's own
/// record of them (the shift/reduce-step family). `identity`, `reverse-token` and
/// `reverse-char` compute a step from a token or character index alone, which on a self link
/// can name a step not yet taken, so they are refused there.
pub const RECURRENT_TRANSLATORS: &[&str] = &[
    "history",
    "shift-reduce-step",
    "reduce-step",
    "parent-shift-reduce-step",
];

/// The translators every backend provides; the others come from the `SyntaxNetComponent`
/// backend, so a `StatelessComponent` source accepts only these.
pub const UNIVERSAL_TRANSLATORS: &[&str] = &["identity", "history"];

/// The transition systems kiln-dragnn implements (`transition_system.registered_name`).
pub const TRANSITION_SYSTEMS: &[&str] = &[
    "shift-only",
    "char-shift-only",
    "tagger",
    "arc-standard",
    "once",
];

/// Transition systems DRAGNN registers that are out of scope for kiln-dragnn; a spec naming
/// one fails validation with a message saying so.
pub const OUT_OF_SCOPE_TRANSITION_SYSTEMS: &[&str] = &[
    "heads",
    "labels",
    "heads_labels",
    "morpher",
    "binary-segment",
    "arc-eager",
];

/// The component backends kiln-dragnn implements (`backend.registered_name`).
pub const BACKENDS: &[&str] = &["SyntaxNetComponent", "StatelessComponent"];

/// Every broken rule of `spec`, in component order.
pub(super) fn check(spec: &MasterSpec) -> Vec<SpecError> {
    let mut check = Check {
        spec,
        errors: Vec::new(),
    };
    for (index, component) in spec.component.iter().enumerate() {
        check.component(index, component);
    }
    check.errors
}

/// `"name"`, or `"#index"` for a component without a name.
pub(super) fn component_label(spec: &MasterSpec, index: usize) -> String {
    match spec.component.get(index).map(ComponentSpec::name) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => format!("#{index}"),
    }
}

fn one_of(names: &[&str]) -> String {
    names.join(", ")
}

struct Check<'s> {
    spec: &'s MasterSpec,
    errors: Vec<SpecError>,
}

impl Check<'_> {
    fn error(&mut self, index: usize, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(SpecError::Invalid {
            component: component_label(self.spec, index),
            field: field.into(),
            message: message.into(),
        });
    }

    /// The index of the first component named `name`.
    fn find(&self, name: &str) -> Option<usize> {
        self.spec.component.iter().position(|c| c.name() == name)
    }

    fn component(&mut self, index: usize, c: &ComponentSpec) {
        let name = c.name();
        if name.is_empty() {
            self.error(
                index,
                "name",
                "is empty; every component needs a name, which linked features refer to",
            );
        } else if let Some(first) = self.find(name).filter(|&first| first < index) {
            self.error(
                index,
                "name",
                format!("{name:?} is also the name of component #{first}; names must be unique"),
            );
        }

        let system = c.transition_system.as_ref().map(|t| t.registered_name());
        match system {
            None => self.error(index, "transition_system", "is missing"),
            Some(system) if TRANSITION_SYSTEMS.contains(&system) => {}
            Some(system) if OUT_OF_SCOPE_TRANSITION_SYSTEMS.contains(&system) => self.error(
                index,
                "transition_system.registered_name",
                format!(
                    "{system:?} is out of scope for kiln-dragnn; supported: {}",
                    one_of(TRANSITION_SYSTEMS)
                ),
            ),
            Some(system) => self.error(
                index,
                "transition_system.registered_name",
                format!(
                    "unknown transition system {system:?}; expected one of {}",
                    one_of(TRANSITION_SYSTEMS)
                ),
            ),
        }

        match c.backend.as_ref().map(|b| b.registered_name()) {
            None => self.error(
                index,
                "backend",
                format!("is missing; expected one of {}", one_of(BACKENDS)),
            ),
            Some(backend) if BACKENDS.contains(&backend) => {}
            Some(backend) => self.error(
                index,
                "backend.registered_name",
                format!(
                    "unknown backend {backend:?}; expected one of {}",
                    one_of(BACKENDS)
                ),
            ),
        }

        if let Some(actions) = c.num_actions {
            if actions < 0 {
                self.error(index, "num_actions", format!("is {actions}; must be >= 0"));
            } else if actions > 0 {
                match system {
                    Some(s @ ("shift-only" | "char-shift-only" | "once")) if actions != 1 => self
                        .error(
                            index,
                            "num_actions",
                            format!("is {actions}, but {s:?} has exactly 1 action"),
                        ),
                    Some("arc-standard") if actions % 2 == 0 => self.error(
                        index,
                        "num_actions",
                        format!(
                            "is {actions}, but arc-standard has 1 + 2 * labels actions \
                             (an odd number)"
                        ),
                    ),
                    _ => {}
                }
            }
        }

        for (field, size) in [
            ("training_beam_size", c.training_beam_size()),
            ("inference_beam_size", c.inference_beam_size()),
        ] {
            if size < 1 {
                self.error(index, field, format!("is {size}; must be >= 1"));
            }
        }

        let attention = c.attention_component();
        if !attention.is_empty() {
            match self.find(attention) {
                Some(j) if j < index => {}
                Some(j) => self.error(
                    index,
                    "attention_component",
                    format!(
                        "{attention:?} is component #{j}; a component attends only to an \
                         earlier one"
                    ),
                ),
                None => self.error(
                    index,
                    "attention_component",
                    format!("no component is named {attention:?}"),
                ),
            }
        }

        for (field, module) in [
            ("network_unit", &c.network_unit),
            ("component_builder", &c.component_builder),
        ] {
            if module
                .as_ref()
                .is_some_and(|m| m.registered_name().is_empty())
            {
                self.error(
                    index,
                    format!("{field}.registered_name"),
                    "is empty; a registered module needs a name",
                );
            }
        }

        for (r, resource) in c.resource.iter().enumerate() {
            let field = format!("resource[{r}]");
            if resource.name().is_empty() {
                self.error(index, format!("{field}.name"), "is empty");
            } else if c.resource[..r].iter().any(|o| o.name() == resource.name()) {
                self.error(
                    index,
                    format!("{field}.name"),
                    format!(
                        "{:?} names two resources of this component",
                        resource.name()
                    ),
                );
            }
            for (p, part) in resource.part.iter().enumerate() {
                if part.file_pattern().is_empty() {
                    self.error(index, format!("{field}.part[{p}].file_pattern"), "is empty");
                }
            }
        }

        for (k, channel) in c.fixed_feature.iter().enumerate() {
            self.fixed(index, c, k, channel);
        }
        for (k, channel) in c.linked_feature.iter().enumerate() {
            self.linked(index, c, k, channel);
        }
    }

    /// The checks common to both kinds of channel: name, fml, size, embedding_dim.
    fn channel(
        &mut self,
        index: usize,
        field: &str,
        name: &str,
        fml: &str,
        size: Option<i32>,
        embedding_dim: i32,
    ) {
        if name.is_empty() {
            self.error(index, format!("{field}.name"), "is empty");
        }
        match fml_templates(fml) {
            Err(e) => self.error(index, format!("{field}.fml"), format!("{fml:?}: {e}")),
            Ok(templates) => {
                if let Some(size) = size {
                    if usize::try_from(size).ok() != Some(templates.len()) {
                        self.error(
                            index,
                            format!("{field}.size"),
                            format!(
                                "is {size}, but fml {fml:?} has {} feature templates",
                                templates.len()
                            ),
                        );
                    }
                }
            }
        }
        if embedding_dim != -1 && embedding_dim <= 0 {
            self.error(
                index,
                format!("{field}.embedding_dim"),
                format!("is {embedding_dim}; must be -1 (not embedded) or > 0"),
            );
        }
    }

    fn fixed(&mut self, index: usize, c: &ComponentSpec, k: usize, ch: &FixedFeatureChannel) {
        let field = format!("fixed_feature[{k}]");
        self.channel(
            index,
            &field,
            ch.name(),
            ch.fml(),
            ch.size,
            ch.embedding_dim(),
        );
        if !ch.name().is_empty() && c.fixed_feature[..k].iter().any(|o| o.name() == ch.name()) {
            self.error(
                index,
                format!("{field}.name"),
                format!("{:?} names two fixed feature channels", ch.name()),
            );
        }
        if ch.vocabulary_size() < 0 {
            self.error(
                index,
                format!("{field}.vocabulary_size"),
                format!("is {}; must be >= 0", ch.vocabulary_size()),
            );
        }
        if ch.is_constant() && ch.pretrained_embedding_matrix.is_none() {
            self.error(
                index,
                format!("{field}.is_constant"),
                "is true, but there is no pretrained_embedding_matrix to hold constant",
            );
        }
        let dropout_id = ch.dropout_id();
        if dropout_id < -2 {
            self.error(
                index,
                format!("{field}.dropout_id"),
                format!(
                    "is {dropout_id}; must be -1 (off), -2 (the channel's unknown \
                     term) or a feature id >= 0"
                ),
            );
        } else if dropout_id != -1 && ch.dropout_keep_probability.is_empty() {
            self.error(
                index,
                format!("{field}.dropout_keep_probability"),
                "is empty, but dropout_id turns feature dropout on",
            );
        }
        if let Some((i, p)) = ch
            .dropout_keep_probability
            .iter()
            .enumerate()
            .find(|(_, p)| !(0.0..=1.0).contains(*p))
        {
            self.error(
                index,
                format!("{field}.dropout_keep_probability[{i}]"),
                format!("is {p}; a probability must be in [0, 1]"),
            );
        }
    }

    fn linked(&mut self, index: usize, c: &ComponentSpec, k: usize, ch: &LinkedFeatureChannel) {
        let field = format!("linked_feature[{k}]");
        self.channel(
            index,
            &field,
            ch.name(),
            ch.fml(),
            ch.size,
            ch.embedding_dim(),
        );
        if !ch.name().is_empty() && c.linked_feature[..k].iter().any(|o| o.name() == ch.name()) {
            self.error(
                index,
                format!("{field}.name"),
                format!("{:?} names two linked feature channels", ch.name()),
            );
        }

        let translator = ch.source_translator();
        let known_translator = TRANSLATORS.contains(&translator);
        if !known_translator {
            self.error(
                index,
                format!("{field}.source_translator"),
                format!(
                    "unknown translator {translator:?}; expected one of {}",
                    one_of(TRANSLATORS)
                ),
            );
        }

        let source = ch.source_component();
        let source_index = if source.is_empty() {
            self.error(index, format!("{field}.source_component"), "is empty");
            None
        } else {
            match self.find(source) {
                None => {
                    self.error(
                        index,
                        format!("{field}.source_component"),
                        format!("no component is named {source:?}"),
                    );
                    None
                }
                Some(j) if j > index => {
                    self.error(
                        index,
                        format!("{field}.source_component"),
                        format!(
                            "{source:?} is component #{j}, after this one (#{index}); a \
                             component links only to earlier components or to itself"
                        ),
                    );
                    None
                }
                Some(j) => Some(j),
            }
        };

        if let Some(j) = source_index {
            if j == index && known_translator && !RECURRENT_TRANSLATORS.contains(&translator) {
                self.error(
                    index,
                    format!("{field}.source_translator"),
                    format!(
                        "{translator:?} cannot translate a recurrent (self) link; use one of {}",
                        one_of(RECURRENT_TRANSLATORS)
                    ),
                );
            }
            let source_backend = self.spec.component[j]
                .backend
                .as_ref()
                .map(RegisteredModuleSpec::registered_name);
            if source_backend == Some("StatelessComponent")
                && known_translator
                && !UNIVERSAL_TRANSLATORS.contains(&translator)
            {
                self.error(
                    index,
                    format!("{field}.source_translator"),
                    format!(
                        "{translator:?} is not provided by {source:?}'s StatelessComponent \
                         backend; it provides only {}",
                        one_of(UNIVERSAL_TRANSLATORS)
                    ),
                );
            }
        }

        let builder = c
            .component_builder
            .as_ref()
            .map(RegisteredModuleSpec::registered_name)
            .unwrap_or("");
        let builder_class = builder.rsplit('.').next().unwrap_or(builder);
        if builder_class.starts_with("Bulk") {
            if known_translator && translator != "identity" {
                self.error(
                    index,
                    format!("{field}.source_translator"),
                    format!("is {translator:?}, but bulk component builders accept only identity"),
                );
            }
            if source_index == Some(index) {
                self.error(
                    index,
                    format!("{field}.source_component"),
                    "is this component itself, but bulk component builders accept no recurrent \
                     links",
                );
            }
        }

        if ch.source_layer().is_empty() {
            self.error(index, format!("{field}.source_layer"), "is empty");
        }
    }
}
