//! The registry of the cell's pluggable policies: every scheduler, queue policy and loss
//! model is one type behind its trait plus one [`Policy`] entry in its module's `POLICIES`
//! list, next to the type ([`crate::scheduler::POLICIES`], [`crate::queue::POLICIES`],
//! [`crate::harq::POLICIES`]). The configuration names a policy and its parameters
//! ([`PolicyChoice`]); the cell builds it through the registry; the binary lists the
//! registry (`clawbed-emu --list-policies --json`) and the Python configuration reads that
//! list from `emulator/policies.json`, which a test keeps equal to [`catalogue`].
//!
//! In a config file a choice is a name or a table with `kind` and the parameters:
//!
//! ```toml
//! [cell]
//! scheduler = "round-robin"          # a name alone: every parameter at its default
//! [cell.loss]
//! kind = "fixed"
//! probability = 0.01
//! ```
//!
//! Adding a policy: write the type, implement the category's trait, and append a
//! [`Policy`] to the module's `POLICIES` (name, summary, parameters, constructor).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::config::ConfigError;

/// A parameter value as written in a config file.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Integer(i64),
    /// A number.
    Real(f64),
    /// A string (never valid for the parameter types defined so far; kept so that the
    /// range check, not the parser, names the parameter).
    Text(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Integer(i) => write!(f, "{i}"),
            ParamValue::Real(x) => write!(f, "{x}"),
            ParamValue::Text(s) => write!(f, "{s:?}"),
        }
    }
}

/// The type and accepted range of a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ParamType {
    /// A finite number in `min..=max` (an integer is accepted too).
    Real {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// An integer in `min..=max`.
    Integer {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// `true` or `false`.
    Bool,
}

/// A parameter's default, as the schema lists it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParamDefault {
    /// A number.
    Real(f64),
    /// An integer.
    Integer(i64),
    /// A flag.
    Bool(bool),
}

impl ParamDefault {
    fn value(self) -> ParamValue {
        match self {
            ParamDefault::Real(x) => ParamValue::Real(x),
            ParamDefault::Integer(i) => ParamValue::Integer(i),
            ParamDefault::Bool(b) => ParamValue::Bool(b),
        }
    }
}

/// One parameter of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Param {
    /// Its key in the policy's table.
    pub name: &'static str,
    /// Its type and range.
    #[serde(flatten)]
    pub kind: ParamType,
    /// The value when the config does not give one.
    pub default: ParamDefault,
    /// What it means, with its unit.
    pub doc: &'static str,
}

impl ParamType {
    /// `value` checked against the type and range, converted to the type's variant; the
    /// error says what was expected.
    pub fn check(&self, value: &ParamValue) -> Result<ParamValue, String> {
        match (*self, value) {
            (ParamType::Real { min, max }, ParamValue::Real(x)) if x.is_finite() && (min..=max).contains(x) => {
                Ok(ParamValue::Real(*x))
            }
            // An integer written for a number: exact below 2^53, the only range policies use.
            (ParamType::Real { min, max }, &ParamValue::Integer(i)) if (min..=max).contains(&(i as f64)) => {
                Ok(ParamValue::Real(i as f64))
            }
            (ParamType::Integer { min, max }, &ParamValue::Integer(i)) if (min..=max).contains(&i) => {
                Ok(ParamValue::Integer(i))
            }
            (ParamType::Bool, &ParamValue::Bool(b)) => Ok(ParamValue::Bool(b)),
            _ => Err(format!("must be {}, got {value}", self.expected())),
        }
    }

    /// What a value of this type and range is, for messages.
    pub fn expected(&self) -> String {
        match *self {
            ParamType::Real { min, max } => format!("a number in {min}..={max}"),
            ParamType::Integer { min, max } => format!("an integer in {min}..={max}"),
            ParamType::Bool => "true or false".into(),
        }
    }
}

impl Param {
    /// `value` checked against the type and range, converted to the type's variant.
    fn check(&self, value: &ParamValue) -> Result<ParamValue, String> {
        self.kind.check(value)
    }
}

/// A policy's parameters, checked and completed with the defaults: what a constructor
/// receives.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    values: BTreeMap<&'static str, ParamValue>,
}

impl Params {
    /// The number `name` (a [`ParamType::Real`] parameter of the policy).
    pub fn real(&self, name: &str) -> f64 {
        match self.values.get(name) {
            Some(ParamValue::Real(x)) => *x,
            other => undeclared(name, other, 0.0),
        }
    }

    /// The integer `name` (a [`ParamType::Integer`] parameter of the policy).
    pub fn integer(&self, name: &str) -> i64 {
        match self.values.get(name) {
            Some(ParamValue::Integer(i)) => *i,
            other => undeclared(name, other, 0),
        }
    }

    /// The flag `name` (a [`ParamType::Bool`] parameter of the policy).
    pub fn flag(&self, name: &str) -> bool {
        match self.values.get(name) {
            Some(ParamValue::Bool(b)) => *b,
            other => undeclared(name, other, false),
        }
    }
}

/// A constructor asked for a parameter its schema does not declare with that type: a bug
/// of the policy's entry, which the registry's tests catch (every policy is built with its
/// defaults). A release build takes `zero` rather than stop the emulator.
fn undeclared<T>(name: &str, found: Option<&ParamValue>, zero: T) -> T {
    debug_assert!(false, "policy parameter `{name}` is not declared with this type (found {found:?})");
    zero
}

/// A policy of a category whose trait object is `T` and whose constructor also sees the
/// context `C` (the cell's or the UE's configuration).
pub struct Policy<T: ?Sized + 'static, C: 'static> {
    /// Its name in configs and on the command line (kebab-case).
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Its parameters.
    pub params: &'static [Param],
    /// Builds it from checked parameters (every declared one present).
    pub build: fn(&Params, &C) -> Box<T>,
}

/// One category of policies: where its choice sits in the config, its default, and its
/// policies.
pub struct Registry<T: ?Sized + 'static, C: 'static> {
    /// The category's name (`scheduler`, `queue`, `loss`): the `--policy` flag's key.
    pub category: &'static str,
    /// Where the choice sits in the config file.
    pub config_key: &'static str,
    /// The policy used when the config names none.
    pub default: &'static str,
    /// What the category decides.
    pub summary: &'static str,
    /// Every policy of the category.
    pub policies: &'static [Policy<T, C>],
    /// How a table without `kind` is read (a category that was a switch before it was a
    /// policy, e.g. `cell.rrc`'s `enabled`): takes the keys it knows out of the table and
    /// returns the kind. `None`: `kind` is required.
    pub legacy: Option<LegacyTable>,
}

/// Reads a kind-less table of a category: removes the keys it interprets from the
/// parameters and returns the policy's name, or says what is wrong.
pub type LegacyTable = fn(&mut BTreeMap<String, ParamValue>) -> Result<String, String>;

impl<T: ?Sized + 'static, C: 'static> Registry<T, C> {
    /// The policy called `name`.
    pub fn get(&self, name: &str) -> Option<&'static Policy<T, C>> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// The names, comma-separated, for messages.
    pub fn names(&self) -> String {
        self.policies.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
    }

    /// A choice of the default policy with its default parameters.
    pub fn default_choice(&self) -> PolicyChoice {
        PolicyChoice::named(self.default)
    }

    /// `choice` with its kind filled in: a table without `kind` read by the category's
    /// [`Registry::legacy`] reader; any other choice as it is.
    pub fn resolve(&self, mut choice: PolicyChoice) -> Result<PolicyChoice, ConfigError> {
        if !choice.kind.is_empty() {
            return Ok(choice);
        }
        let Some(legacy) = self.legacy else {
            return Err(ConfigError::new(
                "kind",
                format!("missing: a {} policy's name (one of {})", self.category, self.names()),
            ));
        };
        choice.kind = legacy(&mut choice.params).map_err(|problem| ConfigError::new("kind", problem))?;
        Ok(choice)
    }

    /// Checks `choice` (a known policy, known parameters within range); the error names
    /// the offending key relative to the choice (`kind`, or the parameter's name).
    pub fn check(&self, choice: &PolicyChoice) -> Result<Params, ConfigError> {
        if choice.kind.is_empty() {
            return self.check(&self.resolve(choice.clone())?);
        }
        let policy = self.get(&choice.kind).ok_or_else(|| {
            ConfigError::new("kind", format!("unknown {} `{}` (one of {})", self.category, choice.kind, self.names()))
        })?;
        if let Some(key) = choice.params.keys().find(|k| !policy.params.iter().any(|p| p.name == k.as_str())) {
            let known = policy.params.iter().map(|p| p.name).collect::<Vec<_>>();
            let hint = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(ConfigError::new(
                key.as_str(),
                format!("unknown parameter of {} `{}` (its parameters: {hint})", self.category, policy.name),
            ));
        }
        let mut values = BTreeMap::new();
        for param in policy.params {
            let value = match choice.params.get(param.name) {
                Some(v) => param.check(v).map_err(|problem| ConfigError::new(param.name, problem))?,
                None => param.default.value(),
            };
            values.insert(param.name, value);
        }
        Ok(Params { values })
    }

    /// Builds the policy `choice` names with `context`.
    pub fn build(&self, choice: &PolicyChoice, context: &C) -> Result<Box<T>, ConfigError> {
        let choice = &self.resolve(choice.clone())?;
        let params = self.check(choice)?;
        // `check` found the policy.
        let policy = self.get(&choice.kind).ok_or_else(|| ConfigError::new("kind", "unknown policy"))?;
        Ok((policy.build)(&params, context))
    }

    /// The category as the catalogue lists it.
    pub fn describe(&self) -> CategoryInfo {
        CategoryInfo {
            category: self.category,
            config_key: self.config_key,
            default: self.default,
            summary: self.summary,
            policies: self
                .policies
                .iter()
                .map(|p| PolicyInfo { name: p.name, summary: p.summary, params: p.params })
                .collect(),
        }
    }
}

/// A policy as listed: name, summary, parameter schema.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyInfo {
    /// Its name.
    pub name: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Its parameters.
    pub params: &'static [Param],
}

/// A category as listed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryInfo {
    /// The category's name.
    pub category: &'static str,
    /// Where the choice sits in the config file (`ues[i].` keys are per UE).
    pub config_key: &'static str,
    /// The default policy.
    pub default: &'static str,
    /// What the category decides.
    pub summary: &'static str,
    /// Its policies.
    pub policies: Vec<PolicyInfo>,
}

/// Every category with its policies: what `clawbed-emu --list-policies` prints and
/// `emulator/policies.json` holds.
pub fn catalogue() -> Vec<CategoryInfo> {
    vec![
        crate::scheduler::POLICIES.describe(),
        crate::queue::POLICIES.describe(),
        crate::harq::POLICIES.describe(),
        crate::rrc::POLICIES.describe(),
        crate::stall::POLICIES.describe(),
    ]
}

/// Sets the choice of `category` in `config` (the cell's categories) or in every UE
/// configuration of `ues` (per-UE categories), after checking it; the `--policy` flag's
/// one branch. The error names the parameter or `kind`.
pub fn apply(
    category: &str,
    choice: PolicyChoice,
    config: &mut crate::CellConfig,
    ues: &mut [&mut crate::UeConfig],
) -> Result<(), ConfigError> {
    match category {
        "scheduler" => {
            crate::scheduler::POLICIES.check(&choice)?;
            config.scheduler = choice;
        }
        "loss" => {
            crate::harq::POLICIES.check(&choice)?;
            config.loss = choice;
        }
        "rrc" => {
            let choice = crate::rrc::POLICIES.resolve(choice)?;
            crate::rrc::POLICIES.check(&choice)?;
            config.rrc = choice;
        }
        "stall" => {
            let choice = crate::stall::POLICIES.resolve(choice)?;
            crate::stall::POLICIES.check(&choice)?;
            config.stall = choice;
        }
        "queue" => {
            crate::queue::POLICIES.check(&choice)?;
            for ue in ues {
                ue.queue = choice.clone();
            }
        }
        other => {
            let known = catalogue().iter().map(|c| c.category).collect::<Vec<_>>().join(", ");
            return Err(ConfigError::new("category", format!("unknown policy category `{other}` (one of {known})")));
        }
    }
    Ok(())
}

/// A policy named in a config, with the parameters given (checked by the category's
/// [`Registry::check`] when the configuration is validated).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyChoice {
    /// The policy's name.
    pub kind: String,
    /// Parameters given (the others take their defaults).
    pub params: BTreeMap<String, ParamValue>,
}

impl PolicyChoice {
    /// The policy `kind` with every parameter at its default.
    pub fn named(kind: &str) -> PolicyChoice {
        PolicyChoice { kind: kind.to_string(), params: BTreeMap::new() }
    }

    /// Parses the command-line form `KIND[,PARAM=VALUE...]`, e.g. `fixed,probability=0.01`
    /// (values: `true`, `false`, integers, numbers).
    pub fn parse(text: &str) -> Result<PolicyChoice, String> {
        let mut parts = text.split(',').map(str::trim);
        let kind = parts.next().filter(|k| !k.is_empty()).ok_or_else(|| format!("`{text}`: no policy name"))?;
        let mut choice = PolicyChoice::named(kind);
        for part in parts {
            let (key, value) =
                part.split_once('=').ok_or_else(|| format!("`{part}` is not PARAM=VALUE (in `{text}`)"))?;
            let value = match value.trim() {
                "true" => ParamValue::Bool(true),
                "false" => ParamValue::Bool(false),
                v => match (v.parse::<i64>(), v.parse::<f64>()) {
                    (Ok(i), _) => ParamValue::Integer(i),
                    (_, Ok(x)) => ParamValue::Real(x),
                    _ => ParamValue::Text(v.to_string()),
                },
            };
            if choice.params.insert(key.trim().to_string(), value).is_some() {
                return Err(format!("parameter `{}` given twice (in `{text}`)", key.trim()));
            }
        }
        Ok(choice)
    }
}

impl Serialize for PolicyChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.params.len() + 1))?;
        map.serialize_entry("kind", &self.kind)?;
        for (k, v) in &self.params {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PolicyChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PolicyChoice, D::Error> {
        struct ChoiceVisitor;

        impl<'de> Visitor<'de> for ChoiceVisitor {
            type Value = PolicyChoice;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a policy name, or a table with `kind` and the policy's parameters")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<PolicyChoice, E> {
                Ok(PolicyChoice::named(name))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PolicyChoice, A::Error> {
                let mut kind: Option<String> = None;
                let mut params = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "kind" {
                        if kind.is_some() {
                            return Err(de::Error::duplicate_field("kind"));
                        }
                        kind = Some(map.next_value()?);
                    } else {
                        let value: ParamValue = map.next_value()?;
                        if params.insert(key.clone(), value).is_some() {
                            return Err(de::Error::custom(format_args!("duplicate parameter `{key}`")));
                        }
                    }
                }
                // A table without `kind`: empty, for the category's `legacy` reader (or
                // its error) to fill in (`Registry::resolve`).
                Ok(PolicyChoice { kind: kind.unwrap_or_default(), params })
            }
        }

        deserializer.deserialize_any(ChoiceVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_builds_with_its_defaults() {
        let cell = crate::CellConfig::default();
        let ue = crate::UeConfig::default();
        for p in crate::scheduler::POLICIES.policies {
            crate::scheduler::POLICIES.build(&PolicyChoice::named(p.name), &cell).expect(p.name);
        }
        for p in crate::harq::POLICIES.policies {
            crate::harq::POLICIES.build(&PolicyChoice::named(p.name), &cell.harq).expect(p.name);
        }
        for p in crate::queue::POLICIES.policies {
            crate::queue::POLICIES.build(&PolicyChoice::named(p.name), &ue).expect(p.name);
        }
        for p in crate::rrc::POLICIES.policies {
            crate::rrc::POLICIES.build(&PolicyChoice::named(p.name), &()).expect(p.name);
        }
        for p in crate::stall::POLICIES.policies {
            crate::stall::POLICIES.build(&PolicyChoice::named(p.name), &()).expect(p.name);
        }
        for category in catalogue() {
            assert!(category.policies.iter().any(|p| p.name == category.default), "{}", category.category);
            for p in &category.policies {
                for param in p.params {
                    param.check(&param.default.value()).expect(param.name);
                }
            }
        }
    }

    #[test]
    fn choices_are_checked_naming_the_key() {
        let loss = &crate::harq::POLICIES;
        let e = loss.check(&PolicyChoice::named("nope")).unwrap_err();
        assert_eq!(e.field, "kind");
        assert!(e.problem.contains("correlated"), "{e}");
        let e = loss.check(&PolicyChoice::parse("fixed,probability=2").unwrap()).unwrap_err();
        assert_eq!(e.field, "probability");
        let e = loss.check(&PolicyChoice::parse("fixed,p=0.5").unwrap()).unwrap_err();
        assert_eq!(e.field, "p");
        let params = loss.check(&PolicyChoice::parse("fixed,probability=1").unwrap()).unwrap();
        assert_eq!(params.real("probability"), 1.0);
        assert!(PolicyChoice::parse("").is_err());
        assert!(PolicyChoice::parse("fixed,probability").is_err());
        assert!(PolicyChoice::parse("fixed,a=1,a=2").is_err());
    }
}
