import EventStream
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Testing

@testable import TodoStore

/// What the journal follower does with the entries a commit of its process brought back
/// (`JournalFollower.commitAnswered`), with no database: the follower is never run.
@Suite struct JournalFollowerPageTests {
    let claims = LocalClaims(instance: "aaaa")
    let published = NIOLockedValueBox<[UInt64]>([])

    func follower(after: UInt64) throws -> JournalFollower {
        let published = self.published
        return JournalFollower(
            connector: try PostgresConnector(settings: PostgresSettings(url: "postgres://todo@127.0.0.1:1/todo")),
            claims: claims,
            health: DatabaseHealth(),
            after: after,
            eventLoop: MultiThreadedEventLoopGroup.singleton.any(),
            logger: Logger(label: "test"),
            publish: { entries in published.withLockedValue { $0 += entries.map(\.seq) } },
            resynchronized: { _ in }
        )
    }

    func item(_ seq: UInt64, _ origin: String, withheld: Bool = false) -> PostgresStore.FollowedEntry {
        (
            JournalEntry(seq: seq, type: "ResponseTodoViewModel", payload: withheld ? [] : [1], mid: nil), origin,
            withheld
        )
    }

    @Test func anotherDaemonsEntriesArePublishedAndTheCursorMovesOverThisProcesssBatchToo() throws {
        let follower = try follower(after: 10)
        let mine = claims.begin()
        let page = FollowedPage(
            after: 10,
            through: 13,
            entries: [item(11, "bbbb:1"), item(12, mine), item(13, "bbbb:2")]
        )
        claims.committed(first: 12, last: 12)
        claims.finish(mine)
        // This process's batch that the page precedes: 14...15.
        claims.committed(first: 14, last: 15)
        follower.commitAnswered(page)
        #expect(published.withLockedValue { $0 } == [11, 13], "its own entry goes out through the local path")
        #expect(follower.handled == 15, "and its batch after the page is stepped over")
    }

    @Test func entriesTheCursorPassedMeanwhileAreNotPublishedAgain() throws {
        let follower = try follower(after: 12)
        follower.commitAnswered(
            FollowedPage(after: 10, through: 14, entries: (11...14).map { item($0, "bbbb:\($0)") })
        )
        #expect(published.withLockedValue { $0 } == [13, 14])
        #expect(follower.handled == 14)
    }

    @Test func aPageThatCannotBeTakenLeavesTheCursorForTheFollowersRead() throws {
        let follower = try follower(after: 10)
        let abandoned = claims.begin()
        #expect(claims.settleInDoubt(abandoned) == nil)
        follower.commitAnswered(
            FollowedPage(after: 10, through: 12, entries: [item(11, "bbbb:1"), item(12, abandoned, withheld: true)])
        )
        #expect(published.withLockedValue { $0 }.isEmpty, "a batch of this process abandoned: its payloads are read")
        #expect(follower.handled == 10)
        follower.commitAnswered(FollowedPage(after: 11, through: 12, entries: [item(12, "bbbb:2")]))
        #expect(follower.handled == 10, "a page that starts after the cursor leaves a hole")
        follower.commitAnswered(FollowedPage(after: 10, through: 12, entries: [item(12, "bbbb:2")]))
        #expect(follower.handled == 10, "nor does one that skips an entry")
        follower.commitAnswered(nil)
        #expect(published.withLockedValue { $0 }.isEmpty)
    }
}
