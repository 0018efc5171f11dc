import EventStream
import Logging
import NIOConcurrencyHelpers
import Synchronization

/// Settings that a reload may replace while the daemon runs.
public final class RelaySettings: Sendable {
    private let box: NIOLockedValueBox<(RelayConfiguration, AuthConfiguration, PayloadRedactor?)>
    /// Moves on after every update (read without the lock, so that sessions can keep a copy
    /// and look at the box again only when it has changed).
    private let updates = Atomic<Int>(0)

    public init(configuration: RelayConfiguration, auth: AuthConfiguration) {
        box = NIOLockedValueBox((configuration, auth, PayloadRedactor(fields: configuration.monitorRedactedFields)))
    }

    public var configuration: RelayConfiguration { box.withLockedValue { $0.0 } }
    /// The configuration and the update it belongs to.
    var versionedConfiguration: (version: Int, configuration: RelayConfiguration) {
        box.withLockedValue { (updates.load(ordering: .acquiring), $0.0) }
    }
    /// How many updates there have been.
    var version: Int { updates.load(ordering: .acquiring) }
    public var auth: AuthConfiguration { box.withLockedValue { $0.1 } }
    /// What monitors' frames go through, made once per configuration (nil: nothing to redact).
    var monitorRedactor: PayloadRedactor? { box.withLockedValue { $0.2 } }

    public func update(configuration: RelayConfiguration, auth: AuthConfiguration) {
        let redactor = PayloadRedactor(fields: configuration.monitorRedactedFields)
        box.withLockedValue {
            $0 = (configuration, auth, redactor)
            updates.add(1, ordering: .releasing)
        }
    }
}

/// What every session of a relay shares.
struct RelayServices<Codec: EventCodec>: Sendable {
    let hub: Hub<Codec>
    /// Hands a request to the sequencer; false when it refused (full or stopping).
    let submit: @Sendable (Codec.Event, Origin) -> Bool
    let journal: any JournalReader
    let settings: RelaySettings
    let logger: Logger
}
