use clap::Parser;

fn main() {
    let cli = nczarrfs::cli::Cli::parse();
    nczarrfs::fuse::logging::init();
    match nczarrfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("nczarrfs: {err}");
            std::process::exit(1);
        }
    }
}
