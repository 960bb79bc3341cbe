#if canImport(Glibc)
import Glibc
#endif
import Gateway
import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support

/// What the meter commands (`pair`, `unpair`, `meters`, `sync`, `readings`) share: opening the store with
/// one-line errors, and validating addresses.
enum MeterCommandSupport {
    /// Opens the database named in the config. Errors are one line: unreadable, locked, full, too new.
    static func openStore(_ config: GatewayConfig, builders: [any OutboxBodyBuilder] = [], use: StoreUse = .meters) throws(GatewayFailure) -> SQLiteStore {
        do {
            return try SQLiteStore(path: config.gateway.database, builders: builders)
        } catch {
            throw storeFailure(error, config: config, use: use)
        }
    }

    /// Opens the database for a command that only reads; read-only when the disk is full or the file
    /// cannot be written, with a note on stderr saying so.
    static func openStoreForReading(_ database: String, command: String) throws(GatewayFailure) -> SQLiteStore {
        let store: SQLiteStore
        do {
            store = try SQLiteStore.openForReading(path: database)
        } catch {
            throw storeFailure(error, database: database, use: .reading)
        }
        if case let .readOnly(reason) = store.readAccess {
            let why = reason.isFull ? "the disk is full" : "it cannot be written (\(reason.systemErrorText ?? reason.message))"
            StandardStream.writeError("glucose-gateway \(command): note: database \(database) opened read-only because \(why); "
                                      + "what is shown is all that is stored, and nothing new can be stored until that is fixed\n")
        }
        return store
    }

    /// Runs `body` with the store open and closes it afterwards, whatever happens. Store errors thrown by
    /// `body` become one-line failures. `readingOnly`: `body` only reads (the store may be read-only).
    static func withStore<T: Sendable>(
        _ config: GatewayConfig, builders: [any OutboxBodyBuilder] = [], readingOnly command: String? = nil,
        _ body: (SQLiteStore) async throws -> T
    ) async throws -> T {
        let store = try command.map { name throws(GatewayFailure) in try openStoreForReading(config.gateway.database, command: name) }
            ?? openStore(config, builders: builders)
        let use: StoreUse = command == nil ? .meters : .reading
        do {
            let result = try await body(store)
            await store.close()
            return result
        } catch let failure as GatewayFailure {
            await store.close()
            throw failure
        } catch {
            await store.close()
            throw storeFailure(error, config: config, use: use)
        }
    }

    /// What a command was doing with the database, for what its error says is kept.
    enum StoreUse {
        /// `status`, `readings`, `meters`.
        case reading
        /// `pair`, `unpair`.
        case meters
        /// `sync`.
        case download
        /// `upload`.
        case upload
        /// `run`.
        case daemon

        var kept: String {
            switch self {
            case .reading: "every stored reading is kept"
            case .meters: "nothing was changed and every stored reading is kept"
            case .download: "nothing new was stored; every stored reading is kept, and the meters keep their records for the next sync"
            case .upload: "nothing was uploaded; every stored reading is kept and stays queued for upload"
            case .daemon: "the gateway cannot store or upload readings until then; every stored reading is kept, and the meters keep their records"
            }
        }
    }

    static func storeFailure(_ error: any Error, config: GatewayConfig, use: StoreUse = .meters) -> GatewayFailure {
        storeFailure(error, database: config.gateway.database, use: use)
    }

    static func storeFailure(_ error: any Error, database: String, use: StoreUse) -> GatewayFailure {
        if let e = error as? SQLiteStoreError, let message = pathProblem(e) {
            return GatewayFailure(.failure, message)
        }
        if let e = error as? SQLiteError {
            if e.isBusy {
                return GatewayFailure(.tempFail, "database \(database) is locked by another process; try again")
            }
            if e.isFull {
                return GatewayFailure(.failure, "database \(database): disk full; \(use.kept); free space on its file system and try again")
            }
            if e.isNotWritable {
                let why = e.systemErrorText ?? e.message
                return GatewayFailure(.failure, "database \(database) cannot be written (\(why)); \(use.kept); make its file system and directory writable for this user and try again")
            }
        }
        var code: Int32?
        if let e = error as? SQLiteStoreError, case let .file(_, _, number) = e { code = number }
        if let e = error as? LockFileError { code = e.errno }
        if let code, code == ENOSPC || code == EDQUOT {
            return GatewayFailure(.failure, "database \(database): disk full; \(use.kept); free space on its file system and try again")
        }
        if let code, code == EROFS || code == EACCES || code == EPERM {
            return GatewayFailure(.failure, "database \(database) cannot be written (\(String(cString: strerror(code)))); \(use.kept); make its file system and directory writable for this user and try again")
        }
        return GatewayFailure(.failure, "database \(database): \(error)")
    }

    /// The message for a database path that is not a file or a link to nothing: the same from every
    /// command, `status` included. Nil for other errors.
    static func pathProblem(_ error: SQLiteStoreError) -> String? {
        switch error {
        case .notAFile, .danglingLink: error.description
        default: nil
        }
    }

    /// A Bluetooth address argument, normalized; a usage error when it is not one.
    static func address(_ text: String?, command: String) throws(GatewayFailure) -> String {
        guard let text else { throw GatewayFailure(.usage, "\(command) needs a meter address (AA:BB:CC:DD:EE:FF)") }
        guard let address = MeterAddress.normalize(text) else {
            throw GatewayFailure(.usage, "'\(text.prefix(40))' is not a Bluetooth address (AA:BB:CC:DD:EE:FF)")
        }
        return address
    }

    static var stdoutIsTerminal: Bool { isatty(1) == 1 }

    /// `2024-05-01T08:00:00Z` for an instant.
    static func isoUTC(_ millis: UnixMillis) -> String { CivilCalendar.isoUTC(millis: millis) }

    /// Left-aligned columns separated by two spaces. Cells are escaped (a meter's name or serial comes
    /// from the meter): a control character can neither break the table nor reach the terminal.
    static func table(_ header: [String], _ unescaped: [[String]]) -> String {
        let rows = unescaped.map { $0.map(TerminalText.escaped) }
        var widths = header.map(\.count)
        for row in rows {
            for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            var out = ""
            for (i, cell) in cells.enumerated() {
                if i == cells.count - 1 { out += cell } else { out += cell + String(repeating: " ", count: widths[i] - cell.count + 2) }
            }
            return out
        }
        return ([line(header)] + rows.map(line)).joined(separator: "\n") + "\n"
    }
}
