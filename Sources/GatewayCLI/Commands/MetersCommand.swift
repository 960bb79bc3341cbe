import GatewayCore

enum MetersCommand: GatewayCommand {
    static let name = "meters"
    static let abstract = "List paired meters"
    static let help = "usage: glucose-gateway meters\n\nList paired meters."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'meters' is not available in this build")
    }
}
