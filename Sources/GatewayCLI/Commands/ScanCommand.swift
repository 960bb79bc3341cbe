import GatewayCore

enum ScanCommand: GatewayCommand {
    static let name = "scan"
    static let abstract = "List nearby meters advertising the Glucose Service"
    static let help = "usage: glucose-gateway scan\n\nList nearby meters advertising the Glucose Service."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'scan' is not available in this build")
    }
}
