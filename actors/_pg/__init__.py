"""The PostgreSQL + pgvector backend (needs the ``pg`` extra): the store and its
handle (``store.py``), the actor (``actor.py``), the schema (``schema.py``), writes
(``prepare.py``, ``sql.py``), reads (``reads.py``, ``search.py``) and filters as SQL
(``filters.py``). ``actors`` imports it only when ``open_pg_store`` is asked for."""
