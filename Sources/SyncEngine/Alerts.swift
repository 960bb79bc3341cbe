import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// Runs the configured `on_network_error` command line (through `/bin/sh -c`; the config layer quotes
/// each word) with the error in its environment, so a headless gateway can light an LED or send a text.
/// The command is started and reaped in the background; it never delays an upload.
public struct AlertCommand: Sendable {
    public var command: String
    public init(command: String) { self.command = command }

    /// Starts the command and returns its pid, or nil when it could not start. `meter`: the meter's
    /// address for a meter's condition (`on_meter_error`), in GATEWAY_METER.
    @discardableResult
    public func run(code: Int, message: String, pending: Int, meter: String? = nil) -> pid_t? {
        var environment: [String] = []
        var pointer = environ
        let ours = ["GATEWAY_ERROR_CODE=", "GATEWAY_ERROR_MESSAGE=", "GATEWAY_PENDING=", "GATEWAY_METER="]
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if !ours.contains(where: { text.hasPrefix($0) }) {
                environment.append(text)
            }
            pointer += 1
        }
        environment += ["GATEWAY_ERROR_CODE=\(code)", "GATEWAY_ERROR_MESSAGE=\(message)", "GATEWAY_PENDING=\(pending)"]
        if let meter { environment.append("GATEWAY_METER=\(meter)") }
        guard !command.isEmpty else { return nil }
        let argv = ["/bin/sh", "-c", command]
        var pid: pid_t = 0
        let status = withCStrings(argv) { argvPointers in
            withCStrings(environment) { envPointers in
                posix_spawn(&pid, "/bin/sh", nil, nil, argvPointers, envPointers)
            }
        }
        guard status == 0 else { return nil }
        let child = pid
        DispatchQueue.global().async {
            var exitStatus: Int32 = 0
            while waitpid(child, &exitStatus, 0) < 0 && errno == EINTR {}
        }
        return child
    }
}

private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for p in pointers { free(p) } }
    return pointers.withUnsafeBufferPointer { buffer in
        // posix_spawn takes `char *const[]`; the strings are our own copies and outlive the call.
        body(buffer.baseAddress!)
    }
}
