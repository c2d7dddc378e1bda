import pytest

from ctxmgmt import Conflict, DefinitionError, NotFound
from ctxmgmt.store import DefinitionStore
from tests.conftest import postgres_url, shipped


def test_create_get_round_trip(store):
    """A created definition reads back with version 1 and server-owned timestamps."""
    created = store.create("mine", shipped("default"), created_by="alice")
    got = store.get("mine")
    assert got == created
    assert (got.version, got.created_by) == (1, "alice")
    assert got.created_time == got.last_modified > 1_700_000_000_000
    assert got.document()["hooks"] == shipped("default")["hooks"]


def test_name_in_argument_wins_over_body(store):
    """The store uses the given name, not the one in the document."""
    store.create("other-name", shipped("default"))
    assert store.get("other-name").name == "other-name"


def test_create_twice_conflicts(store):
    """A second create of a name is a Conflict, never an overwrite."""
    store.create("mine", shipped("default"))
    with pytest.raises(Conflict):
        store.create("mine", shipped("tool-heavy"))
    assert store.get("mine").description == shipped("default")["description"]


def test_invalid_definition_never_reaches_the_table(store):
    """Validation runs before any write."""
    with pytest.raises(DefinitionError):
        store.create("bad", {"hooks": {"pre_llm": []}})
    assert not store.exists("bad")
    store.create("good", shipped("default"))
    with pytest.raises(DefinitionError):
        store.replace("good", {"hooks": {"pre_llm": [{"type": "Nope"}]}})
    assert store.get("good").version == 1


def test_replace_bumps_version_and_can_remove_a_hook(store):
    """Replace swaps the whole document, so a hook can be removed; the version grows."""
    store.create("mine", shipped("token-aware-truncation"))
    doc = shipped("token-aware-truncation")
    del doc["hooks"]["post_tool"]
    updated = store.replace("mine", doc)
    assert updated.version == 2 and set(updated.hooks) == {"pre_llm"}
    assert updated.last_modified >= updated.created_time


def test_if_version_is_compare_and_set(store):
    """A stale expected version is a Conflict naming the current one."""
    store.create("mine", shipped("default"))
    store.replace("mine", shipped("default"), if_version=1)
    with pytest.raises(Conflict) as info:
        store.replace("mine", shipped("default"), if_version=1)
    assert info.value.current_version == 2


def test_missing_names_are_not_found(store):
    """get, replace, delete and resolve of a missing name raise NotFound."""
    for call in (
        lambda: store.get("x"),
        lambda: store.replace("x", shipped("default")),
        lambda: store.delete("x"),
        lambda: store.resolve("x"),
    ):
        with pytest.raises(NotFound):
            call()


def test_list_is_paged_sorted_in_byte_order_with_real_total(store):
    """list sorts by name in byte order on every database and reports the real total."""
    names = ["b", "a_b", "a-b", "0z", "ab", "a"]
    for n in names:
        store.create(n, shipped("default"))
    total, rows = store.list(offset=0, limit=4)
    assert total == 6
    assert [r.name for r in rows] == sorted(names, key=str.encode)[:4]
    _, rest = store.list(offset=4, limit=10)
    assert [r.name for r in rest] == sorted(names, key=str.encode)[4:]


def test_list_filters_on_the_name(store):
    """q keeps names containing the text; LIKE wildcards are literal."""
    for n in ("alpha", "beta", "alphabet", "a_b", "axb"):
        store.create(n, shipped("default"))
    total, rows = store.list(q="alpha")
    assert total == 2 and {r.name for r in rows} == {"alpha", "alphabet"}
    assert [r.name for r in store.list(q="_")[1]] == ["a_b"]


def test_resolve_caches_by_version_and_sees_other_instances(database_url):
    """Resolution is cached per version; an update or delete by another instance is seen next time."""
    a = DefinitionStore.open(database_url)
    b = DefinitionStore.open(database_url, upgrade=False)
    a.create("shared", shipped("default"))
    first = a.resolve("shared")
    assert a.resolve("shared") is first
    b.replace("shared", shipped("tool-heavy"))
    second = a.resolve("shared")
    assert second is not first and second.description == shipped("tool-heavy")["description"]
    b.delete("shared")
    with pytest.raises(NotFound):
        a.resolve("shared")
    a.engine.dispose()
    b.engine.dispose()


def test_migrations_are_idempotent(database_url):
    """Running the migrations twice is harmless."""
    from ctxmgmt.store import connect, migrate

    engine = connect(database_url)
    migrate(engine)
    migrate(engine)
    engine.dispose()


def test_versions_never_repeat_across_delete_and_recreate(store):
    """A re-created name continues after the deleted versions, so an If-Match taken from the
    deleted definition cannot match the new one; last_modified never precedes created_time."""
    doc = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}
    store.create("abc", doc)
    store.replace("abc", doc, if_version=1)
    store.delete("abc")
    again = store.create("abc", doc)
    assert again.version == 3
    for stale in (1, 2):
        with pytest.raises(Conflict):
            store.replace("abc", doc, if_version=stale)
    updated = store.replace("abc", doc)
    assert updated.version == 4 and updated.last_modified >= updated.created_time


@pytest.mark.postgres
def test_reads_survive_a_dropped_connection(tmp_path):
    """When PostgreSQL drops the pooled connections (a restart, a firewall), the next resolve
    and get still answer: the read runs again on a new connection, with no ping before
    every checkout."""

    database_url = postgres_url()
    store = DefinitionStore.open(database_url)
    try:
        if store.exists("mine"):
            store.delete("mine", force=True)
        store.create("mine", {"hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}})
        assert store.resolve("mine").name == "mine"
        with store.engine.connect() as conn:
            conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        assert store.resolve("mine").name == "mine"
        assert store.get("mine").version == 1
    finally:
        store.engine.dispose()
