//! What kiln-beam's command-line programs share: argument handling with the usage text.

/// Parses the program's arguments with `parse`. When they do not parse, prints the reason and
/// the usage and exits: status 0 for `--help` (which `parse` reports as an empty message),
/// 2 for a usage error.
pub fn options_or_exit<T>(
    name: &str,
    usage: &str,
    parse: impl Fn(&[String]) -> Result<T, String>,
) -> T {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{name}: {e}");
            }
            eprintln!("{usage}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    }
}
