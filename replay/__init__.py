"""Web page replay: synthetic and recorded pages, an owned nginx, and page loaders that run
inside the UE namespace (a headless browser, and an HTTP/2 client)."""
