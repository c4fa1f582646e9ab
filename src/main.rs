use clap::Parser;

fn main() {
    let cli = nczarrfs::cli::Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match nczarrfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("nczarrfs: {err}");
            std::process::exit(1);
        }
    }
}
