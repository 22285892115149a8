"""The validator loop's stages as objects: each is built with its collaborators (typed in
ports.py) and runs one pass at a time on the pass's own `PassState` (passstate.py).

Why objects and not mixins of `loop.Validator`: a stage's needs are its constructor, so a test
builds one with fakes and mypy checks every call; nothing is probed with hasattr at run time.
The Validator (loop.py) composes them (wiring.py) and runs them in order."""
