import GatewayCore

enum SimulateMeterCommand: GatewayCommand {
    static let name = "simulate-meter"
    static let abstract = "Simulate a glucose meter, on real BlueZ or as a BlueZ stand-in"
    static let help = "usage: glucose-gateway simulate-meter\n\nSimulate a glucose meter, on real BlueZ or as a BlueZ stand-in."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'simulate-meter' is not available in this build")
    }
}
