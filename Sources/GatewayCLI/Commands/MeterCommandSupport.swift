#if canImport(Glibc)
import Glibc
#endif
import Gateway
import GatewayCore
import SQLiteStore

/// What the meter commands (`pair`, `unpair`, `meters`, `sync`, `readings`) share: opening the store with
/// one-line errors, and validating addresses.
enum MeterCommandSupport {
    /// Opens the database named in the config. Errors are one line: unreadable, locked, full, too new.
    static func openStore(_ config: GatewayConfig, builders: [any OutboxBodyBuilder] = []) throws(GatewayFailure) -> SQLiteStore {
        do {
            return try SQLiteStore(path: config.gateway.database, builders: builders)
        } catch {
            throw storeFailure(error, config: config)
        }
    }

    /// Runs `body` with the store open and closes it afterwards, whatever happens. Store errors thrown by
    /// `body` become one-line failures.
    static func withStore<T: Sendable>(
        _ config: GatewayConfig, builders: [any OutboxBodyBuilder] = [], _ body: (SQLiteStore) async throws -> T
    ) async throws -> T {
        let store = try openStore(config, builders: builders)
        do {
            let result = try await body(store)
            await store.close()
            return result
        } catch let failure as GatewayFailure {
            await store.close()
            throw failure
        } catch {
            await store.close()
            throw storeFailure(error, config: config)
        }
    }

    static func storeFailure(_ error: any Error, config: GatewayConfig) -> GatewayFailure {
        if let e = error as? SQLiteStoreError, let message = pathProblem(e) {
            return GatewayFailure(.failure, message)
        }
        if let e = error as? SQLiteError {
            if e.isBusy {
                return GatewayFailure(.tempFail, "database \(config.gateway.database) is locked by another process; try again")
            }
            if e.isFull {
                return GatewayFailure(.failure, "database \(config.gateway.database): disk full; nothing was lost, free space and try again")
            }
        }
        return GatewayFailure(.failure, "database \(config.gateway.database): \(error)")
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
    static func isoUTC(_ millis: UnixMillis) -> String {
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        return LocalDateTime(naiveSeconds: seconds).description + "Z"
    }

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

/// The download lowers a meter's highest sequence after its counter went back (a battery change), so that
/// the syncs after it are incremental again; the SQLite store does that through `resetHighestSequence`.
extension SQLiteStore: SequenceCounterStore {}
