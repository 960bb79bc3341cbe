import GatewayCore

enum PairCommand: GatewayCommand {
    static let name = "pair"
    static let abstract = "Pair a meter with its PIN and remember it"
    static let help = "usage: glucose-gateway pair\n\nPair a meter with its PIN and remember it."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'pair' is not available in this build")
    }
}
