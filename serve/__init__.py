"""`vidax-serve`: one warm model behind an HTTP API and a web page, with a durable job queue.

`store` keeps the jobs (SQLite, WAL), `requests` turns a request into vidax-gen's options and checks it
the way vidax-gen does, `service` runs the queue on one worker thread, `app` is the FastAPI app.
"""
