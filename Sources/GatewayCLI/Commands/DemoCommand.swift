import GatewayCore

enum DemoCommand: GatewayCommand {
    static let name = "demo"
    static let abstract = "Run a self-contained demonstration with a simulated meter and a loopback receiver"
    static let help = "usage: glucose-gateway demo\n\nRun a self-contained demonstration with a simulated meter and a loopback receiver."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'demo' is not available in this build")
    }
}
