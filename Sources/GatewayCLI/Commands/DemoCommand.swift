#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support

enum DemoCommand: GatewayCommand {
    static let name = "demo"
    static let abstract = "Run a self-contained demonstration with a simulated meter and a loopback receiver"
    static let help = """
    usage: glucose-gateway demo

    Runs scripts/demo.sh from the source tree this program was built in, with this program: a private
    D-Bus with the BlueZ stand-in and a simulated meter (glucose-gateway-simulator, beside this program
    or in ../libexec/glucose-gateway), a loopback Nightscout, `pair` and `run`; readings
    arriving, a network drop (error code shown, readings kept) and the replay. About a minute; touches
    neither the system bus nor Bluetooth hardware; leaves no process behind.
    Set GLUCOSE_GATEWAY_SOURCE to the source tree if the program was moved.

    Exit status: 0 the demo ran to the end; 1 a phase failed; 69 the script was not found.
    """
    static let options = OptionTable.none

    static func run(_ arguments: inout Arguments, context: CommandContext) async throws -> ExitStatus {
        try arguments.finish()
        guard let executable = selfPath() else {
            throw GatewayFailure(.unavailable, "cannot tell where this program is (no /proc/self/exe)")
        }
        var candidates: [String] = []
        if let source = context.environment["GLUCOSE_GATEWAY_SOURCE"] { candidates.append(source) }
        // .build/<triple>/<config>/glucose-gateway or .build/<config>/glucose-gateway: a few levels up.
        var directory = executable
        for _ in 0..<5 {
            directory = parent(directory)
            candidates.append(directory)
        }
        guard let root = candidates.first(where: { access($0 + "/scripts/demo.sh", R_OK) == 0 }) else {
            throw GatewayFailure(.unavailable, "scripts/demo.sh not found near \(executable); set GLUCOSE_GATEWAY_SOURCE to the source tree")
        }
        setenv("GLUCOSE_GATEWAY_BIN", executable, 1)
        let argv = ["bash", root + "/scripts/demo.sh"]
        var cArgs = argv.map { strdup($0) }
        cArgs.append(nil)
        execvp("bash", &cArgs)
        throw GatewayFailure(.failure, "cannot start bash: \(String(cString: strerror(errno)))")
    }

    static func selfPath() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}
