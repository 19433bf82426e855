fn main() {
    std::process::exit(capsule::cli::main());
}
