import EventStream
import Foundation
import Testing

@testable import TodoApp

let t0 = Timestamp(millisecondsSince1970: 1_700_000_000_000)
let t1 = Timestamp(millisecondsSince1970: 1_700_000_001_000)

func stored(_ version: Int = 3, completedAt: Timestamp? = nil, deleted: Bool = false) -> Todo {
    Todo(
        id: UUID(uuidString: "6F1C0000-0000-0000-0000-000000000001") ?? UUID(),
        createdAt: t0,
        title: "Milk",
        subtitle: "2 l",
        priority: .high,
        completedAt: completedAt,
        deleted: deleted,
        version: version
    )
}

@Suite struct TodoWriteTests {
    @Test func toggleActsOnTheStoredTodo() throws {
        let todo = stored()
        let write = TodoWrite(id: todo.id, expectedVersion: nil, change: .toggleComplete)
        let done = try write.apply(to: todo, now: t1).get()
        #expect(done.completedAt == t1)
        #expect(done.version == 4)
        let undone = try write.apply(to: done, now: t1).get()
        #expect(undone.completedAt == nil)
    }

    @Test func deleteIsSoft() throws {
        let todo = stored()
        let deleted = try TodoWrite(id: todo.id, expectedVersion: 3, change: .delete).apply(to: todo, now: t1).get()
        #expect(deleted.deleted)
        #expect(deleted.title == "Milk")
    }

    @Test func aStaleVersionConflictsAndCarriesTheCurrentTodo() {
        let todo = stored()
        let result = TodoWrite(id: todo.id, expectedVersion: 2, change: .delete).apply(to: todo, now: t1)
        guard case .failure(let error) = result else {
            Issue.record("expected conflict")
            return
        }
        #expect(error.code == .conflict)
        #expect(error.current == TodoViewModel(todo: todo))
    }

    @Test func unknownIdsAreNotFoundExceptForAFreshSave() throws {
        let id = UUID()
        for change in [TodoChange.toggleComplete, .delete] {
            guard
                case .failure(let error) = TodoWrite(id: id, expectedVersion: nil, change: change).apply(
                    to: nil,
                    now: t1
                )
            else {
                Issue.record("expected not_found")
                continue
            }
            #expect(error.code == .notFound)
        }
        let staleSave = TodoWrite(id: id, expectedVersion: 4, change: .update(TodoEdit(title: "x"))).apply(
            to: nil,
            now: t1
        )
        #expect((try? staleSave.get()) == nil)
        let created = try TodoWrite(id: id, expectedVersion: 0, change: .update(TodoEdit(title: " New "))).apply(
            to: nil,
            now: t1
        ).get()
        #expect(created.title == "New")
        #expect(created.createdAt == t1)
        #expect(created.version == 1)
    }

    @Test func aSaveKeepsCompletedAtWhenCompletionDidNotChange() throws {
        let todo = stored(completedAt: t0)
        let edit = TodoEdit(title: "Oat milk", completed: true)
        let saved = try TodoWrite(id: todo.id, expectedVersion: 3, change: .update(edit)).apply(to: todo, now: t1).get()
        #expect(saved.completedAt == t0)
        #expect(saved.title == "Oat milk")
        let uncompleted = try TodoWrite(id: todo.id, expectedVersion: nil, change: .update(TodoEdit(completed: false)))
            .apply(to: todo, now: t1).get()
        #expect(uncompleted.completedAt == nil)
    }

    @Test(arguments: ["", "   ", "\n\t "])
    func blankTitlesFailValidation(_ title: String) {
        let result = TodoWrite(id: UUID(), expectedVersion: 0, change: .update(TodoEdit(title: title))).apply(
            to: nil,
            now: t1
        )
        guard case .failure(let error) = result else {
            Issue.record("expected validation_failed")
            return
        }
        #expect(error.code == .validationFailed)
        #expect(error.field == "title")
        #expect(error.message == "Please add a title.")
    }

    @Test func titleLengthCountsUnicodeScalarsAfterTrimming() {
        #expect(
            (try? Todo.validatedTitle(" " + String(repeating: "é", count: 1000) + " ").get())?.unicodeScalars.count
                == 1000
        )
        #expect((try? Todo.validatedTitle(String(repeating: "a", count: 1001)).get()) == nil)
        #expect((try? Todo.validatedSubtitle(String(repeating: "a", count: 10_001)).get()) == nil)
    }

    @Test func textHoldingUPlus0000IsRefusedWithTheFieldNamed() {
        for (result, field) in [
            (Todo.validatedTitle("a\u{0}b"), "title"), (Todo.validatedTitle("\u{0}"), "title"),
            (Todo.validatedSubtitle("x\u{0}"), "subtitle"),
        ] {
            guard case .failure(let error) = result else {
                Issue.record("expected validation_failed for the \(field)")
                continue
            }
            #expect(error.code == .validationFailed)
            #expect(error.field == field)
            #expect(error.message == "The \(field) cannot contain the character U+0000.")
        }
        #expect((try? Todo.validatedTitle("a\u{1}b").get()) == "a\u{1}b")
    }

    @Test func equalityComparesDeleted() {
        #expect(stored(deleted: true) != stored(deleted: false))
    }
}

@Suite struct ViewModelTests {
    @Test func displayStringsFollowTheSeed() {
        let viewModel = TodoViewModel(todo: stored(completedAt: t0))
        #expect(viewModel.subtitle == "Priority: HIGH")
        #expect(viewModel.completeActionTitle == "Uncomplete")
        let detail = TodoDetailViewModel(todo: stored(deleted: true))
        #expect(detail.completedString == "Incomplete")
        #expect(detail.priorityString == "HIGH")
        #expect(detail.deletedString == "Restore")
    }

    @Test func timestampsAreRFC3339UTCWithMilliseconds() {
        #expect(Timestamp(millisecondsSince1970: 0).rfc3339 == "1970-01-01T00:00:00.000Z")
        #expect(Timestamp(millisecondsSince1970: 1_700_000_000_123).rfc3339 == "2023-11-14T22:13:20.123Z")
        #expect(Timestamp(millisecondsSince1970: 951_782_400_000).rfc3339 == "2000-02-29T00:00:00.000Z")
        #expect(Timestamp(millisecondsSince1970: -1).rfc3339 == "1969-12-31T23:59:59.999Z")
        // The first and last instants the in-place writer takes, and one on each side of them.
        #expect(Timestamp(millisecondsSince1970: -62_167_219_200_000).rfc3339 == "0000-01-01T00:00:00.000Z")
        #expect(Timestamp(millisecondsSince1970: 253_402_300_799_999).rfc3339 == "9999-12-31T23:59:59.999Z")
        #expect(Timestamp(millisecondsSince1970: 253_402_300_800_000).rfc3339 == "10000-01-01T00:00:00.000Z")
        // A JSON writer writes the same, in place or not.
        let edges: [(Int64, Bool)] = [
            (-62_167_219_200_001, false), (-62_167_219_200_000, true), (0, true), (253_402_300_799_999, true),
            (253_402_300_800_000, false),
        ]
        for (ms, inPlace) in edges {
            let time = Timestamp(millisecondsSince1970: ms)
            var writer = JSONWriter()
            writer.write(time)
            #expect(String(decoding: writer.bytes, as: UTF8.self) == "\"\(time.rfc3339)\"")
            #expect(time.hasFourDigitYear == inPlace)
        }
        // Whatever it writes reads back as the same instant.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<1000 {
            let ms = Int64.random(in: -62_167_219_200_000...253_402_300_799_999, using: &generator)
            #expect(Timestamp(rfc3339: Timestamp(millisecondsSince1970: ms).rfc3339)?.millisecondsSince1970 == ms)
        }
    }

    @Test func titlesAreTrimmedOfWhiteSpaceAtBothEnds() {
        #expect(Todo.trimmed("plain title") == "plain title")
        #expect(Todo.trimmed("  padded\t\n") == "padded")
        #expect(Todo.trimmed("\u{00A0}no-break space\u{2003}") == "no-break space")
        #expect(Todo.trimmed("ends in é") == "ends in é")
        #expect(Todo.trimmed("\u{2028}") == "")
        #expect(Todo.trimmed("x") == "x")
        #expect(Todo.trimmed("") == "")
    }
}
