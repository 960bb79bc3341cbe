import GatewayCore

enum DecodeCommand: GatewayCommand {
    static let name = "decode"
    static let abstract = "Decode a Glucose Service value from a capture (hex) and print it as JSON"
    static let help = "usage: glucose-gateway decode\n\nDecode a Glucose Service value from a capture (hex) and print it as JSON."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'decode' is not available in this build")
    }
}
