<?php
require 'db.php';
$product = (int)($_GET['product'] ?? 0);
$qty = max(1, (int)($_GET['qty'] ?? 1));
$db = db();
$stmt = $db->prepare('INSERT INTO orders (product_id, qty) SELECT id, ? FROM products WHERE id = ?');
$stmt->bind_param('ii', $qty, $product);
$stmt->execute();
if ($stmt->affected_rows !== 1) { http_response_code(404); page('No such product', ''); exit; }
header('Location: /orders.php', true, 303);
