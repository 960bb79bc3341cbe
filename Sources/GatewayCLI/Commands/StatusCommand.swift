import GatewayCore

enum StatusCommand: GatewayCommand {
    static let name = "status"
    static let abstract = "Show adapter, meters and destinations"
    static let help = "usage: glucose-gateway status\n\nShow adapter, meters and destinations."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'status' is not available in this build")
    }
}
