"""Domain types shared by every layer: datatypes, requests, responses, config views."""
