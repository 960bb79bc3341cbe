import GatewayCore

enum UnpairCommand: GatewayCommand {
    static let name = "unpair"
    static let abstract = "Forget a meter (its readings are kept)"
    static let help = "usage: glucose-gateway unpair\n\nForget a meter (its readings are kept)."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'unpair' is not available in this build")
    }
}
