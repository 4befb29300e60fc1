//! Chen & Manning's (2014) parser feature set as SyntaxNet's `parser_features` spells it:
//! words and tags at 20 locators, labels at the last 12 (the children of the two top stack
//! tokens), ready to put in a spec's `fml`.
//!
//! Depends on nothing.

/// The 20 locators of the word and tag features: the first four input tokens, the top four
/// stack tokens, and for the two top stack tokens their outermost children (`child(±1)`),
/// those children's inner siblings (`child(±1).sibling(∓1)`) and their second outermost
/// children (`child(±2)`).
///
/// ```
/// use kiln_dragnn::features::chen_manning::{LABEL_LOCATORS, LOCATORS};
/// assert_eq!((LOCATORS.len(), LABEL_LOCATORS.len()), (20, 12));
/// assert_eq!(LOCATORS[4], "stack");
/// ```
pub const LOCATORS: [&str; 20] = [
    "input",
    "input(1)",
    "input(2)",
    "input(3)",
    "stack",
    "stack(1)",
    "stack(2)",
    "stack(3)",
    "stack.child(1)",
    "stack.child(1).sibling(-1)",
    "stack.child(-1)",
    "stack.child(-1).sibling(1)",
    "stack(1).child(1)",
    "stack(1).child(1).sibling(-1)",
    "stack(1).child(-1)",
    "stack(1).child(-1).sibling(1)",
    "stack.child(2)",
    "stack.child(-2)",
    "stack(1).child(2)",
    "stack(1).child(-2)",
];

/// The 12 locators of the label features (the last 12 of [`LOCATORS`]).
pub const LABEL_LOCATORS: &[&str] = LOCATORS.split_at(8).1;

/// The `fml` reading `feature` at each of `locators`, space-separated.
///
/// ```
/// use kiln_dragnn::features::chen_manning::{fml, LABEL_LOCATORS, LOCATORS};
/// assert!(fml(&LOCATORS, "word").starts_with("input.word input(1).word"));
/// assert_eq!(fml(LABEL_LOCATORS, "label").split(' ').count(), 12);
/// ```
pub fn fml(locators: &[&str], feature: &str) -> String {
    locators
        .iter()
        .map(|l| format!("{l}.{feature}"))
        .collect::<Vec<_>>()
        .join(" ")
}
