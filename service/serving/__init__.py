"""uvicorn as hookbridge runs it (``server``): embedded servers and the API's connection guard."""
