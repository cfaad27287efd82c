<?php
// GET: the product's order form; POST: place the order for the signed-in customer.
require 'db.php';
$product = (int)($_REQUEST['product'] ?? 0);
$db = db();
$stmt = $db->prepare('SELECT id, name, price FROM products WHERE id = ?');
$stmt->bind_param('i', $product);
$stmt->execute();
$p = $stmt->get_result()->fetch_assoc();
if ($p === null) { http_response_code(404); page('No such product', ''); exit; }
if ($_SERVER['REQUEST_METHOD'] === 'POST') {
    $c = require_customer();
    $qty = max(1, (int)($_POST['qty'] ?? 1));
    $stmt = $db->prepare('INSERT INTO orders (customer_id, product_id, qty) VALUES (?, ?, ?)');
    $stmt->bind_param('iii', $c['id'], $p['id'], $qty);
    $stmt->execute();
    header('Location: /orders.php', true, 303);
    exit;
}
page('Order ' . $p['name'], sprintf('<form method="post" action="/order.php"><input type="hidden" name="product" value="%d">'
     . '<p class="price">$%s each</p><label for="qty">Quantity</label> <input id="qty" name="qty" type="number" value="1" min="1">'
     . ' <button type="submit">Place order</button></form>', $p['id'], $p['price']));
