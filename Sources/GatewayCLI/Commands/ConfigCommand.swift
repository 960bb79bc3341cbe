import GatewayCore

enum ConfigCommand: GatewayCommand {
    static let name = "config"
    static let abstract = "config check [PATH]: validate a config file"
    static let help = "usage: glucose-gateway config\n\nconfig check [PATH]: validate a config file."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'config' is not available in this build")
    }
}
