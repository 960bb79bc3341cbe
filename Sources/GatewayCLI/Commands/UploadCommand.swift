import GatewayCore

enum UploadCommand: GatewayCommand {
    static let name = "upload"
    static let abstract = "Upload pending readings now; --check tests credentials, --redrive re-sends quarantined ones"
    static let help = "usage: glucose-gateway upload\n\nUpload pending readings now; --check tests credentials, --redrive re-sends quarantined ones."

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        throw GatewayFailure(.failure, "'upload' is not available in this build")
    }
}
