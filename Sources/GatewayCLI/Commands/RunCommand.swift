import GatewayCore

enum RunCommand: GatewayCommand {
    static let name = "run"
    static let abstract = "Run the gateway daemon (discovery, downloads, uploads, status)"
    static let help = "usage: glucose-gateway run\n\nRun the gateway daemon (discovery, downloads, uploads, status)."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'run' is not available in this build")
    }
}
