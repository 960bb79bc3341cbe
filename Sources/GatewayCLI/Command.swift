import GatewayCore
import Support

/// One subcommand: a name, a one-line abstract, a help text, and `run`. Parsing errors are usage errors
/// (exit 64); everything else maps to an `ExitStatus` through `GatewayFailure`.
public protocol GatewayCommand: Sendable {
    static var name: String { get }
    static var abstract: String { get }
    /// Full `--help` text (usage line first).
    static var help: String { get }
    /// The options the command knows, so the tokenizer can take them (and their values) in any order
    /// before it reads positionals. `--help`/`-h` and the global `--config`/`--verbose` are always known.
    static var options: OptionTable { get }
    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus
}

/// What every command gets: global options and the process environment.
public struct CommandContext: Sendable {
    /// `--config PATH`, else `GLUCOSE_GATEWAY_CONFIG`, else nil (the default path applies).
    public var configPath: String?
    public var environment: [String: String]
    public var logger: Logger
    public init(configPath: String?, environment: [String: String], logger: Logger) {
        self.configPath = configPath
        self.environment = environment
        self.logger = logger
    }
}

/// Every subcommand, in the order `--help` lists them.
let allCommands: [any GatewayCommand.Type] = [
    DecodeCommand.self,
    ScanCommand.self,
    PairCommand.self,
    UnpairCommand.self,
    MetersCommand.self,
    SyncCommand.self,
    RunCommand.self,
    UploadCommand.self,
    ReadingsCommand.self,
    StatusCommand.self,
    ConfigCommand.self,
    CaptureCommand.self,
    DemoCommand.self,
]
