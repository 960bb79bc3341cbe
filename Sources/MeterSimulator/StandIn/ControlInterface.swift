import DBusKit
import GatewayCore
import GlucoseProfile
import Support

/// `org.glucosegateway.Simulator1` at `/org/glucosegateway/simulator`, on the stand-in's own connection
/// (so it moves with `org.bluez` across restarts): lets tests script scenarios at run time.
enum ControlInterface {
    static let path = "/org/glucosegateway/simulator"
    static let name = "org.glucosegateway.Simulator1"

    /// One line per method, for `--help` and the notes.
    static let summary = """
      AddRecord(s address, s record_json) -> q sequence   store a record (meter-file record object;
                                                           "sequence" optional: next number)
      AddGeneratedRecord(s address) -> q sequence         store the next ordinary record
      Advertise(s address, d seconds)                     advertise now for that long (simulated seconds)
      DropLink(s address)                                 the meter drops the link (reason Remote)
      SetFaults(s address, s faults_json)                 replace the meter's faults (meter-file "faults")
      Records(s address) -> aq                            sequence numbers stored
      Describe(s address) -> s                            the meter as it is now, as a meter file (JSON):
                                                           identity, PIN, every stored record, faults
      MeterClock(s address) -> (s kind, s time, d skew)   the meter's clock: its kind (cts, gls-date-time,
                                                           vendor, none), the time it shows now
                                                           (YYYY-MM-DDTHH:MM:SS) and its skew in seconds
      RestartBluetoothd()                                 drop org.bluez and every registration, then
                                                           take it again under a new unique name
      CrashBluetoothd()                                   as RestartBluetoothd, but like a killed bluetoothd
                                                           its discovery stays on in the kernel for 10.24 s
                                                           and refuses discoveries (InProgress) meanwhile
      RemoveAdapter() / AddAdapter()                      hot-unplug and re-plug hci0
      FailConnect(s address, as outcomes)                 script the next Connect calls: abort-by-local,
                                                           canceled, in-progress, hang, resolved-before-export
      StaleConnect(s address)                             the meter is already connected (no Connect call)
      ForgetBond(s address)                               the meter forgets its bond (reset, paired
                                                           elsewhere); bluetoothd keeps its key, so each
                                                           Connect is refused at encryption as on real
                                                           BlueZ (Disconnected reason Authentication)
      SetRfkill(b blocked)                                rfkill: Powered=false, PowerState off-blocked
      SetQuirks(s address, as quirks)                     play real bluetoothd behaviour for the meter:
                                                           silent-connected (Connected=true without a
                                                           signal, BlueZ 5.66), response-before-records
                                                           (the RACP response overtakes the records),
                                                           pairing-stalls (Pair ends AuthenticationCanceled
                                                           after the passkey was given), full-socket (the
                                                           5th and 6th measurement sent through an
                                                           acquired socket are dropped, once)
      StopAnswering(d seconds)                            keep org.bluez but answer no call for that long
                                                           (real seconds; 0: for good), as a hung bluetoothd
      CallLog() -> as / ClearCallLog()                    "Interface.Method /path" of every BlueZ call
      Meters() -> as                                      meter addresses
    """
}

extension BlueZStandIn {
    func controlInterface() -> DBusInterface {
        @Sendable func address(_ call: DBusMethodCall) throws -> String {
            guard let text = call.arguments.first?.string, let a = MeterDescription.normalizedAddress(text) else {
                throw DBusError(.invalidArgs, "first argument must be a meter address")
            }
            return a
        }
        return DBusInterface(ControlInterface.name, methods: [
            DBusMethod("AddRecord", in: "ss", out: "q") { [weak self] call in
                guard let self else { return [] }
                let a = try address(call)
                guard call.arguments.count == 2, let json = call.arguments[1].string else {
                    throw DBusError(.invalidArgs, "AddRecord expects (ss)")
                }
                let peripheral = try await self.meterPeripheral(a)
                let meter = await peripheral.meter
                let unit = meter.records.last?.unit ?? .kilogramPerLitre
                let record: MeterRecord
                do {
                    let value = try JSONValue.parse(json)
                    record = try MeterFile.record(from: value, path: "record", defaultUnit: unit,
                                                  defaultSequence: await peripheral.nextSequenceNumber)
                } catch let e as JSONParseError {
                    throw DBusError(.invalidArgs, e.description)
                } catch let e as MeterFileError {
                    throw DBusError(.invalidArgs, e.description)
                }
                await peripheral.store(record)
                return [.uint16(record.sequenceNumber)]
            },
            DBusMethod("AddGeneratedRecord", in: "s", out: "q") { [weak self] call in
                guard let self else { return [] }
                let peripheral = try await self.meterPeripheral(try address(call))
                guard let r = await peripheral.addGeneratedRecord() else {
                    throw DBusError(.failed, "the meter's new-record limit is reached")
                }
                return [.uint16(r.sequenceNumber)]
            },
            DBusMethod("Advertise", in: "sd") { [weak self] call in
                guard let self else { return [] }
                let peripheral = try await self.meterPeripheral(try address(call))
                guard call.arguments.count == 2, let seconds = call.arguments[1].double, seconds >= 0 else {
                    throw DBusError(.invalidArgs, "Advertise expects (sd) with seconds >= 0")
                }
                await peripheral.advertise(seconds: seconds)
                return []
            },
            DBusMethod("DropLink", in: "s") { [weak self] call in
                guard let self else { return [] }
                try await self.dropLink(try address(call))
                return []
            },
            DBusMethod("SetFaults", in: "ss") { [weak self] call in
                guard let self else { return [] }
                let a = try address(call)
                guard call.arguments.count == 2, let json = call.arguments[1].string else {
                    throw DBusError(.invalidArgs, "SetFaults expects (ss)")
                }
                let faults: MeterFaults
                do {
                    faults = try MeterFile.faults(try JSONObject(try JSONValue.parse(json), path: "faults"))
                } catch let e as JSONParseError {
                    throw DBusError(.invalidArgs, e.description)
                } catch let e as MeterFileError {
                    throw DBusError(.invalidArgs, e.description)
                }
                try await self.setFaults(a, faults)
                return []
            },
            DBusMethod("Records", in: "s", out: "aq") { [weak self] call in
                guard let self else { return [] }
                let meter = try await self.meterPeripheral(try address(call)).meter
                return [.array(element: "q", meter.records.map { .uint16($0.sequenceNumber) })]
            },
            DBusMethod("Describe", in: "s", out: "s") { [weak self] call in
                guard let self else { return [] }
                let meter = try await self.meterPeripheral(try address(call)).meter
                return [.string(MeterFile.json(meter).compactText)]
            },
            DBusMethod("MeterClock", in: "s", out: "ssd") { [weak self] call in
                guard let self else { return [] }
                let peripheral = try await self.meterPeripheral(try address(call))
                let kind = await peripheral.meter.clock.kind
                let reading = await peripheral.clockReading
                return [.string(kind.rawValue), .string(reading.time.isoString), .double(reading.skewSeconds)]
            },
            DBusMethod("RestartBluetoothd") { [weak self] _ in
                // Reply first: the connection this call came in on is about to close.
                Task { [weak self] in
                    try? await Task.sleep(for: .milliseconds(50))
                    do { try await self?.restartBluetoothd() } catch {
                        self?.logger.error("restart failed: \(error)")
                    }
                }
                return []
            },
            DBusMethod("CrashBluetoothd") { [weak self] _ in
                Task { [weak self] in
                    try? await Task.sleep(for: .milliseconds(50))
                    do { try await self?.crashBluetoothd() } catch {
                        self?.logger.error("crash failed: \(error)")
                    }
                }
                return []
            },
            DBusMethod("RemoveAdapter") { [weak self] _ in
                await self?.removeAdapter()
                return []
            },
            DBusMethod("AddAdapter") { [weak self] _ in
                try await self?.addAdapter()
                return []
            },
            DBusMethod("FailConnect", in: "sas") { [weak self] call in
                guard let self else { return [] }
                let a = try address(call)
                guard call.arguments.count == 2, let names = call.arguments[1].stringArray else {
                    throw DBusError(.invalidArgs, "FailConnect expects (sas)")
                }
                var outcomes: [ConnectFailure] = []
                for n in names {
                    guard let f = ConnectFailure(rawValue: n) else {
                        throw DBusError(.invalidArgs, "unknown outcome '\(n)': " + ConnectFailure.allCases.map(\.rawValue).joined(separator: ", "))
                    }
                    outcomes.append(f)
                }
                try await self.failConnect(a, outcomes)
                return []
            },
            DBusMethod("StaleConnect", in: "s") { [weak self] call in
                guard let self else { return [] }
                try await self.staleConnect(try address(call))
                return []
            },
            DBusMethod("ForgetBond", in: "s") { [weak self] call in
                guard let self else { return [] }
                try await self.forgetBond(try address(call))
                return []
            },
            DBusMethod("SetRfkill", in: "b") { [weak self] call in
                guard let self else { return [] }
                guard let blocked = call.arguments.first?.bool else { throw DBusError(.invalidArgs, "SetRfkill expects (b)") }
                await self.setRfkill(blocked: blocked)
                return []
            },
            DBusMethod("SetQuirks", in: "sas") { [weak self] call in
                guard let self else { return [] }
                let a = try address(call)
                guard call.arguments.count == 2, let names = call.arguments[1].stringArray else {
                    throw DBusError(.invalidArgs, "SetQuirks expects (sas)")
                }
                var set: Set<Quirk> = []
                for n in names {
                    guard let q = Quirk(rawValue: n) else {
                        throw DBusError(.invalidArgs, "unknown quirk '\(n)': " + Quirk.allCases.map(\.rawValue).joined(separator: ", "))
                    }
                    set.insert(q)
                }
                try await self.setQuirks(a, set)
                return []
            },
            DBusMethod("StopAnswering", in: "d") { [weak self] call in
                guard let seconds = call.arguments.first?.double, seconds >= 0, seconds.isFinite else {
                    throw DBusError(.invalidArgs, "StopAnswering expects (d) with seconds >= 0")
                }
                // Reply first: this very call must still be answered.
                Task { [weak self] in
                    try? await Task.sleep(for: .milliseconds(20))
                    await self?.stopAnswering(seconds: seconds)
                }
                return []
            },
            DBusMethod("CallLog", out: "as") { [weak self] _ in
                [.strings(await self?.calls ?? [])]
            },
            DBusMethod("ClearCallLog") { [weak self] _ in
                await self?.clearCalls()
                return []
            },
            DBusMethod("Meters", out: "as") { [weak self] _ in
                [.strings(await self?.meterAddresses ?? [])]
            },
        ])
    }
}

/// The bonds file of `--state FILE`: `{"bonded": ["AA:BB:...", ...]}`, mode 0600.
enum StandInState {
    static func load(path: String) -> [String]? {
        guard let data = FileContents.read(path),
              let json = try? JSONValue.parse(data),
              case .object(let members) = json,
              let bonded = members.first(where: { $0.key == "bonded" })?.value,
              case .array(let items) = bonded else { return nil }
        return items.compactMap { if case .string(let s) = $0 { MeterDescription.normalizedAddress(s) } else { nil } }
    }

    static func save(bonded: [String], path: String) throws {
        let text = "{\"bonded\": [" + bonded.map { "\"\($0)\"" }.joined(separator: ", ") + "]}\n"
        guard (try? AtomicFile.write(text, to: path, mode: 0o600)) != nil else {
            throw GatewayFailure(.failure, "cannot write \(path)")
        }
    }
}

/// Documentation strings of the control interface, for `glucose-gateway-simulator --help`.
public enum StandInDocs {
    public static let controlPath = ControlInterface.path
    public static let controlSummary = ControlInterface.summary
}
