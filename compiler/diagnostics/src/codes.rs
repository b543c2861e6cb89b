//! The registry of diagnostic codes. A code, once published, keeps its meaning forever; every
//! code has an explain page (`explain/<ID>.md`) with what it means, why, a wrong and a fixed
//! example. Ranges: E01xx syntax, E02xx names and modules, E03xx types, E04xx roles,
//! E05xx placement, E06xx batch arithmetic, E07xx algorithm sanity, E08xx memory, E09xx the
//! planner (`rlc plan`), E10xx external rewards and environments (`verifier`, `environment`), E11xx recipes
//! (generic pipelines),
//! W… warnings.

use crate::Severity;
use serde::Serialize;

/// What the registry knows about one code.
#[derive(Debug)]
pub struct CodeInfo {
    pub code: Code,
    /// The stable identifier users see, e.g. `E0103`.
    pub id: &'static str,
    pub severity: Severity,
    /// A one-line summary (shown by `rlc explain --list`).
    pub title: &'static str,
    /// The explain page, Markdown.
    pub explain: &'static str,
}

macro_rules! codes {
    ($( $variant:ident = $id:literal, $severity:ident, $title:literal; )*) => {
        /// A stable diagnostic code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code { $($variant,)* }

        /// Every code, in the order of [`Code`]'s variants.
        pub static CODES: &[CodeInfo] = &[
            $(CodeInfo {
                code: Code::$variant,
                id: $id,
                severity: Severity::$severity,
                title: $title,
                explain: include_str!(concat!("../explain/", $id, ".md")),
            },)*
        ];
    };
}

codes! {
    // Syntax.
    UnexpectedToken = "E0101", Error, "unexpected token";
    UnclosedDelimiter = "E0102", Error, "unclosed delimiter";
    YamlStyleField = "E0103", Error, "`key: value` where the language wants `key = value`";
    AssignInExpression = "E0104", Error, "`=` where `==` is meant";
    KeywordAsName = "E0105", Error, "a keyword used as a name";
    UnterminatedString = "E0106", Error, "unterminated string";
    InvalidNumber = "E0107", Error, "invalid number literal";
    UnknownUnit = "E0108", Error, "unknown unit suffix on a number";
    UnmatchedCloser = "E0109", Error, "closing delimiter with no opening one";
    Semicolon = "E0110", Error, "`;` is not used in rl";
    ForeignSyntax = "E0111", Error, "a construct from another language";
    HashComment = "E0112", Error, "`#` comment";
    SingleQuotedString = "E0113", Error, "single-quoted string";
    InvalidEscape = "E0114", Error, "invalid escape in a string";
    ChainedComparison = "E0115", Error, "chained comparison";
    InvalidCharacter = "E0116", Error, "a character that cannot appear in rl source";
    ExpectedItem = "E0117", Error, "expected an item at the top level";
    CommaBetweenFields = "E0118", Error, "`,` between `key = value` fields";
    UnknownLayout = "E0119", Error, "unknown parallel layout";
    NestedTooDeep = "E0120", Error, "expression nested too deep or too long";
    EmptyFile = "W0101", Warning, "file declares nothing";
    // Names and modules.
    UndefinedName = "E0201", Error, "undefined name";
    DuplicateName = "E0202", Error, "a name declared twice";
    UnknownModule = "E0203", Error, "unknown module";
    ImportCycle = "E0204", Error, "import cycle";
    PrivateItem = "E0205", Error, "private item used from another module";
    NoSuchItem = "E0206", Error, "module has no item of that name";
    ManifestInvalid = "E0207", Error, "malformed package manifest (`rl.toml`)";
    MissingDependency = "E0208", Error, "a dependency with no package at its path";
    NotADependency = "E0209", Error, "import of a package that is not a dependency";
    DependencyNameMismatch = "E0210", Error, "a dependency whose manifest names another package";
    NoSuchPackageModule = "E0211", Error, "a package has no module of that name";
    DependencyCycle = "E0212", Error, "packages that depend on each other in a cycle";
    UnusedImport = "W0201", Warning, "unused import";
    UnusedBinding = "W0202", Warning, "unused binding";
    // Types.
    ShapeMismatch = "E0301", Error, "tensor shapes do not match";
    DtypeMismatch = "E0302", Error, "element types do not match";
    WrongArity = "E0303", Error, "wrong number of arguments";
    UnknownArgument = "E0304", Error, "unknown, missing or repeated argument name";
    LossNotScalar = "E0305", Error, "a loss that is not a scalar";
    LossIgnoresModel = "E0306", Error, "a loss that does not depend on the updated model";
    TypeMismatch = "E0307", Error, "a value of the wrong kind";
    UnknownField = "E0308", Error, "no such field";
    UnknownType = "E0309", Error, "unknown type";
    UnknownAxis = "E0310", Error, "reduction over an axis the tensor does not have";
    NotConstant = "E0311", Error, "a value that must be known before the job starts";
    CarriedTwice = "E0312", Error, "a carried value assigned more than once in a step";
    SizeOutOfRange = "E0313", Error, "a size too large for the compiler to check";
    NotAKernel = "E0314", Error, "a computation the kernel IR cannot express";
    // Roles.
    UnsupportedOperation = "E0401", Error, "operation not supported by the model's kind";
    UpdateFrozen = "E0402", Error, "update of a frozen model";
    VocabMismatch = "E0403", Error, "models or task disagree on the vocabulary";
    UnknownRoleKind = "E0404", Error, "unknown model kind";
    MissingSetting = "E0405", Error, "a required setting is missing";
    HfConfig = "E0406", Error, "a Hugging Face model folder without a usable config.json";
    HfArchMismatch = "E0407", Error, "the arch disagrees with the Hugging Face config.json";
    TokenizerFile = "E0408", Error, "a dataset tokenizer folder without a usable tokenizer.json";
    // Placement.
    DevicesOutOfRange = "E0501", Error, "device range outside the cluster";
    LayoutProduct = "E0502", Error, "layout does not match the number of devices";
    HeadsTp = "E0503", Error, "tensor parallelism does not divide the attention heads";
    KvHeadsTp = "E0504", Error, "tensor parallelism and key/value heads do not fit";
    LayersPp = "E0505", Error, "pipeline parallelism does not divide the layers";
    VocabTp = "E0506", Error, "tensor parallelism does not divide the vocabulary";
    HeadsSp = "E0507", Error, "sequence parallelism does not divide the attention heads";
    PhaseNotPlaced = "E0508", Error, "a phase the pipeline runs has no placement";
    UnknownPhase = "E0509", Error, "placement of an unknown role or phase";
    DuplicatePlacement = "E0510", Error, "a phase placed twice";
    AsyncColocated = "E0511", Error, "asynchronous generation on the devices that train";
    // Batch arithmetic.
    BatchNotDivisible = "E0601", Error, "batch does not split over the data-parallel ranks";
    MinibatchTooLarge = "E0602", Error, "minibatch larger than the batch";
    MinibatchMicro = "E0603", Error, "minibatch does not split into micro-batches";
    ZeroAccumulation = "E0604", Error, "zero gradient-accumulation steps";
    EpochsBelowOne = "E0605", Error, "fewer than one epoch";
    WarmupOutlastsRun = "E0606", Error, "learning-rate warm-up as long as the run or longer";
    // Algorithm sanity.
    GroupOfOne = "E0701", Error, "group-based estimator with one sample per prompt";
    SequenceTooLong = "E0702", Error, "prompt and response longer than the model's context";
    NonPositiveTemperature = "E0703", Error, "sampling temperature not above zero";
    InvalidSampling = "E0704", Error, "invalid sampling setting";
    NoAnswers = "E0705", Error, "supervised data from a dataset without reference answers";
    UnknownSplit = "E0706", Error, "unknown data split";
    SplitGroups = "E0707", Error, "update minibatches split the groups its loss reduces over";
    UncorrectedStaleness = "W0701", Warning, "asynchronous rollouts trained without an off-policy correction";
    // Memory.
    OutOfMemory = "E0801", Error, "the estimate exceeds device memory";
    // The planner (`place … auto`).
    NoFeasibleLayout = "E0901", Error, "no layout of an `auto` placement fits";
    // External rewards (`verifier`).
    UnknownVerifierOption = "E1001", Error, "unknown verifier option";
    VerifierSetting = "E1002", Error, "a verifier setting out of range";
    VerifierField = "E1003", Error, "a verifier field the sampled dataset does not have";
    VerifierNotRollout = "E1004", Error, "a verifier called on something that is not a rollout";
    SequenceRewardPerToken = "E1005", Error, "a verifier's per-sequence reward where per-token rewards are needed";
    VerifierRecordAsReward = "E1006", Error, "a verifier's result record used as its reward";
    VerifierOutsidePipeline = "E1007", Error, "a verifier called outside a pipeline";
    EnvironmentCalled = "E1008", Error, "an environment called like a function";
    NotAnEnvironment = "E1009", Error, "`env:` of `generate` names something that is not an environment";
    EnvTurns = "E1010", Error, "`max_turns` or `max_obs` missing, out of range, or without `env:`";
    EnvContext = "E1011", Error, "a multi-turn rollout longer than the model's context";
    // Recipes (generic pipelines).
    RecipeCall = "E1101", Error, "a pipeline called anywhere but as the whole body of another pipeline";
    // Wasteful plans.
    IdleDevices = "W0301", Warning, "devices no phase uses";
    UnusedPlacement = "W0302", Warning, "a placement for a phase the pipeline never runs";
    UnevenColocation = "W0303", Warning, "a phase on fewer devices than its colocated partners";
}

impl CodeInfo {
    /// The program of the page's `## Wrong` section (the first fenced block after the heading),
    /// which produces this code.
    pub fn wrong_example(&self) -> Option<&'static str> {
        example(self.explain, "## Wrong")
    }

    /// The program of the page's `## Fixed` section, the corrected `## Wrong` one, which
    /// produces no diagnostic.
    pub fn fixed_example(&self) -> Option<&'static str> {
        example(self.explain, "## Fixed")
    }
}

/// The body of the first fenced code block after the line `heading`.
fn example(page: &'static str, heading: &str) -> Option<&'static str> {
    let at = page.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &page[at..];
    let open = rest.find("```")?;
    let body = open + rest[open..].find('\n')? + 1;
    let close = if rest[body..].starts_with("```") {
        body
    } else {
        body + rest[body..].find("\n```")? + 1
    };
    Some(&rest[body..close])
}

impl Code {
    pub fn info(self) -> &'static CodeInfo {
        &CODES[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.info().id
    }

    /// Looks a code up by its identifier, ignoring ASCII case (`e0103` finds `E0103`).
    pub fn parse(id: &str) -> Option<Code> {
        CODES
            .iter()
            .find(|c| c.id.eq_ignore_ascii_case(id))
            .map(|c| c.code)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_in_variant_order_with_unique_ids() {
        let mut seen = std::collections::BTreeSet::new();
        for (i, info) in CODES.iter().enumerate() {
            assert_eq!(info.code as usize, i, "{} is out of order", info.id);
            assert!(seen.insert(info.id), "{} is listed twice", info.id);
            let prefix = match info.severity {
                Severity::Error => 'E',
                Severity::Warning => 'W',
                Severity::Note => 'N',
            };
            assert!(
                info.id.starts_with(prefix),
                "{} does not match its severity",
                info.id
            );
        }
    }

    #[test]
    fn every_explain_page_has_a_title_and_both_examples() {
        for info in CODES {
            let page = info.explain;
            assert!(
                page.starts_with(&format!("# {}", info.id)),
                "{}: page must start with `# {}`",
                info.id,
                info.id
            );
            assert!(
                page.contains("## Wrong"),
                "{}: page lacks a `## Wrong` example",
                info.id
            );
            assert!(
                page.contains("## Fixed"),
                "{}: page lacks a `## Fixed` example",
                info.id
            );
        }
    }

    #[test]
    fn parse_is_case_insensitive() {
        assert_eq!(Code::parse("e0103"), Some(Code::YamlStyleField));
        assert_eq!(Code::parse("E9999"), None);
    }
}
