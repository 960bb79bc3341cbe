import GatewayCore

enum ReadingsCommand: GatewayCommand {
    static let name = "readings"
    static let abstract = "Export stored readings as a table, JSON or CSV"
    static let help = "usage: glucose-gateway readings\n\nExport stored readings as a table, JSON or CSV."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'readings' is not available in this build")
    }
}
