//! `sealctl`: the sealstream admin CLI. Flags → [`sealstream::ctl::run`]; nothing else.

fn main() -> std::process::ExitCode {
    sealstream::ctl::main()
}
