import httpx


async def test_resource_resolves_by_id(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/1")
    assert response.status_code == 200
    assert response.json()["id"] == 1
