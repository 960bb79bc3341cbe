import GatewayCore

enum SyncCommand: GatewayCommand {
    static let name = "sync"
    static let abstract = "Download new readings from paired meters, then upload"
    static let help = "usage: glucose-gateway sync\n\nDownload new readings from paired meters, then upload."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'sync' is not available in this build")
    }
}
