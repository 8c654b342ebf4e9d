"""The public import name of hookbridge's parts meant for others' code: today ``hookbridge.testing``, the
conformance kit a vendor plugin's tests subclass (issue 27 names it so). The service itself is the
``service`` package; this one only re-exports from it, so that there is one copy of everything."""
